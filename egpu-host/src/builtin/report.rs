//! What the built-in maps hold, as text: the report the summary and `egpu maps PID` print, and
//! the lines of a process's user maps.

use std::fmt::Write as _;

use egpu_ebpf::MapKind;
use egpu_maps::{Array, HashMap, RawMap};

use super::{
    BUCKETS, Builtin, CAPTURED, SYNC_SLOTS, Tally, TimingCount, device_objects, user_map_name,
    user_objects,
};
use crate::Health;

impl Builtin {
    /// What the maps hold, as lines (counts that are 0 left out; `shapes`: the blocks of the
    /// launched grids and the threads of their blocks, summed); with `health`, a last line of
    /// the probes' runs, faults and refusals:
    ///
    /// ```text
    /// pid 711
    /// device 0 GPU-65677075-2d73-7461-6e64-2d696e2d0000 NVIDIA H200
    /// per_device 0 copies 1 4 sets 1 4194304 allocations 1 4194304 launches 17 17408 4352 graphs 0
    /// launches 17
    /// shapes blocks 17408 threads 4352
    /// kernel 0x84d0c88d2e5ac11e 3 _Z5shiftPffi
    /// copies dtoh 1 4
    /// sets 1 4194304
    /// allocations device 1 4194304
    /// frees device 1 0
    /// syncs context 1
    /// modules ptx 1 2011
    /// probes runs=21 faults=0 rejected=0
    /// ```
    pub fn report(&self, health: Option<Health>) -> String {
        let mut text = format!("pid {}\n", self.pid);
        // The devices used: ordinal, UUID (`-`: the driver did not say) and name.
        for d in self.devices() {
            let uuid = if d.uuid.is_empty() { "-" } else { &d.uuid };
            let line = format!("device {} {uuid} {}", d.index, d.name);
            let _ = writeln!(text, "{}", line.trim_end());
        }
        // What the built-in probes counted on each device: count and bytes of copies, sets and
        // allocations; kernel launches, their blocks and block threads (as `shapes` sums them),
        // graph launches.
        for c in self.device_counts() {
            let _ = writeln!(
                text,
                "per_device {} copies {} {} sets {} {} allocations {} {} launches {} {} {} \
                 graphs {}",
                c.index,
                c.copies.0,
                c.copies.1,
                c.sets.0,
                c.sets.1,
                c.allocations.0,
                c.allocations.1,
                c.launches.0,
                c.launches.1,
                c.launches.2,
                c.graph_launches
            );
        }
        let kernels = self.launches_by_kernel();
        let run: u64 = kernels.iter().filter(|(id, _)| *id < CAPTURED).map(|(_, n)| n).sum();
        let _ = writeln!(text, "launches {run}");
        if run > 0 {
            let (blocks, threads) =
                (self.array(&self.shapes, BUCKETS), self.array(&self.shapes, 2 * BUCKETS + 1));
            let _ = writeln!(text, "shapes blocks {blocks} threads {threads}");
        }
        for (id, n) in kernels {
            let _ = writeln!(text, "kernel {id:#018x} {n} {}", self.name(id));
        }
        self.report_times(&mut text);
        for (i, kind) in ["default", "htod", "dtoh", "dtod", "peer", "htoh"].iter().enumerate() {
            let Tally { count, bytes } = self.total(&self.copies, i as u32);
            if count > 0 {
                let _ = writeln!(text, "copies {kind} {count} {bytes}");
            }
        }
        let sets = (8..16).map(|i| self.total(&self.copies, i)).fold(Tally::default(), |a, e| {
            Tally { count: a.count + e.count, bytes: a.bytes + e.bytes }
        });
        if sets.count > 0 {
            let _ = writeln!(text, "sets {} {}", sets.count, sets.bytes);
        }
        for (op, name) in [(0, "allocations"), (1, "frees")] {
            for (k, kind) in ["device", "pinned", "managed"].iter().enumerate() {
                let Tally { count, bytes } = self.total(&self.allocations, op * 4 + k as u32);
                if count > 0 {
                    let _ = writeln!(text, "{name} {kind} {count} {bytes}");
                }
            }
        }
        let freed = self.array(&self.freed, 0);
        if freed > 0 {
            let _ = writeln!(text, "freed {freed}");
        }
        for (k, kind) in ["stream", "event", "context", "device"].iter().enumerate() {
            let count = self.total(&self.syncs, k as u32).count;
            if count > 0 {
                let _ = writeln!(text, "syncs {kind} {count}");
            }
        }
        for (k, kind) in ["other", "ptx"].iter().enumerate() {
            let Tally { count, bytes } = self.total(&self.modules, k as u32);
            if count > 0 {
                let _ = writeln!(text, "modules {kind} {count} {bytes}");
            }
        }
        if let Some(h) = health {
            let _ = writeln!(
                text,
                "probes runs={} faults={} rejected={}",
                h.runs, h.faults, h.rejected
            );
        }
        text
    }

    /// The kernel times from CUDA events, when any were taken: per kernel, `kernel_time ID
    /// LAUNCHES NANOSECONDS BUCKETS NAME` (the histogram's buckets that are not 0, as
    /// `bits:count` joined by commas); the timing's counts; per kind of synchronisation the
    /// calls timed and their nanoseconds (`sync_time context 2 1500`).
    fn report_times(&self, text: &mut String) {
        for (id, t) in self.kernel_times() {
            let buckets: Vec<String> = (0..)
                .zip(t.buckets)
                .filter(|(_, n)| *n > 0)
                .map(|(b, n): (u32, u64)| format!("{b}:{n}"))
                .collect();
            let buckets = if buckets.is_empty() { "-".into() } else { buckets.join(",") };
            let name = self.name(id);
            let _ =
                writeln!(text, "kernel_time {id:#018x} {} {} {buckets} {name}", t.count, t.sum_ns);
        }
        let counts = [
            TimingCount::Timed,
            TimingCount::Captured,
            TimingCount::PoolFull,
            TimingCount::Failed,
            TimingCount::Lost,
        ]
        .map(|c| self.timing_count(c));
        if counts.iter().any(|&n| n > 0) {
            let [timed, captured, full, failed, lost] = counts;
            let _ = writeln!(
                text,
                "timing timed={timed} captured={captured} full={full} failed={failed} lost={lost}"
            );
        }
        for (k, kind) in ["stream", "event", "context", "device"].iter().enumerate() {
            let first = k as u32 * (BUCKETS + 1);
            let count: u64 = (0..BUCKETS).map(|i| self.array(&self.sync_times, first + i)).sum();
            if count > 0 && (k as u32) < SYNC_SLOTS {
                let ns = self.array(&self.sync_times, first + BUCKETS);
                let _ = writeln!(text, "sync_time {kind} {count} {ns}");
            }
        }
    }

    /// Launches counted per kernel id, in id order: the kernels' (ids below the captured and
    /// graph launches' own), then those.
    pub fn launches_by_kernel(&self) -> Vec<(u64, u64)> {
        let mut kernels: Vec<(u64, u64)> = HashMap::<u64, u64>::from_raw(self.launches.clone())
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        kernels.sort();
        kernels
    }

    /// The kernels launched (not in graphs), with how many times, and their names.
    pub fn kernels_launched(&self) -> Vec<(u64, u64, String)> {
        let kernels = self.launches_by_kernel().into_iter().filter(|(id, _)| *id < CAPTURED);
        kernels.map(|(id, n)| (id, n, self.name(id))).collect()
    }

    /// Process `pid`'s user maps in shared memory, by name.
    pub fn user_maps(&self) -> Vec<(String, RawMap)> {
        let prefix = user_map_name(self.pid, "");
        user_objects(self.pid)
            .into_iter()
            .filter_map(|object| {
                let raw = RawMap::open_shared(&object).ok()?;
                Some((object[prefix.len()..].to_owned(), raw))
            })
            .collect()
    }

    /// Process `pid`'s per-device maps in shared memory (each device's own copy of a user map,
    /// [`super::device_map_name`]): device, map name and map, by device then name.
    pub fn device_maps(&self) -> Vec<(u32, String, RawMap)> {
        device_objects(self.pid)
            .into_iter()
            .filter_map(|(device, map, object)| {
                Some((device, map, RawMap::open_shared(&object).ok()?))
            })
            .collect()
    }

    /// [`render_maps`](Self::render_maps) with the per-device maps in shared memory
    /// ([`device_maps`](Self::device_maps)).
    pub fn render_maps(&self, maps: &[(String, RawMap)]) -> String {
        self.render_maps_on(maps, &self.device_maps())
    }

    /// What `maps` hold, a line per entry: `map NAME KEY VALUE`, keys that are known kernel ids
    /// by the kernel's name and every other key as its number, per-CPU values summed (hash maps
    /// and arrays with 4- or 8-byte keys and values); a ring buffer by what it holds for its
    /// consumer and what it dropped (`ring NAME records of 32 B: pending 7168 dropped 0`); maps
    /// of other shapes by their kind only; for a map with a part in GPU memory, how long ago
    /// that was merged into it (`device part of NAME merged 12.5 ms ago`). A map whose device
    /// parts are on two devices or more (`per_device`: device, map name, that device's own map)
    /// then has each device's entries after its own, `map NAME device D KEY VALUE`: what that
    /// device's probes did, which sum to the map's values (with the host's writes).
    pub fn render_maps_on(
        &self,
        maps: &[(String, RawMap)],
        per_device: &[(u32, String, RawMap)],
    ) -> String {
        let mut text = String::new();
        let key = |k: u64| -> String {
            let name = self.name(k);
            if k != 0 && !name.is_empty() && !name.starts_with('(') { name } else { k.to_string() }
        };
        for (name, raw) in maps {
            let g = *raw.geometry();
            if g.kind == MapKind::RingBuf {
                // Its records are for its consumer; what it holds and dropped, without reading.
                let (pending, dropped) = (raw.len(), raw.refused());
                let _ = writeln!(
                    text,
                    "ring {name} records of {} B: pending {pending} dropped {dropped}",
                    g.value_size
                );
            }
            let shown = match g.kind {
                MapKind::RingBuf => Some(Vec::new()),
                _ => shown_entries(raw, &key),
            };
            let Some(mut lines) = shown else {
                let _ = writeln!(
                    text,
                    "map {name} {} ({} B keys, {} B values: not shown)",
                    g.kind.name(),
                    g.key_size,
                    g.value_size
                );
                continue;
            };
            // Numbers in their order, then names.
            lines.sort_by_key(|(k, v)| (k.parse::<u64>().map_err(|_| k.clone()), *v));
            for (k, v) in lines {
                let _ = writeln!(text, "map {name} {k} {v}");
            }
            let mut mine: Vec<&(u32, String, RawMap)> = per_device
                .iter()
                .filter(|(_, n, m)| n == name && m.geometry() == raw.geometry())
                .collect();
            mine.sort_by_key(|(d, _, _)| *d);
            let mut devices: Vec<u32> = mine.iter().map(|(d, _, _)| *d).collect();
            devices.dedup();
            if g.kind != MapKind::RingBuf && devices.len() > 1 {
                for (device, _, own) in mine {
                    let mut lines = shown_entries(own, &key).unwrap_or_default();
                    lines.sort_by_key(|(k, v)| (k.parse::<u64>().map_err(|_| k.clone()), *v));
                    for (k, v) in lines {
                        let _ = writeln!(text, "map {name} device {device} {k} {v}");
                    }
                }
            }
            if let Some(merged) = raw.device_merged_ns() {
                let ms = egpu_maps::merge::wall_clock_ns().saturating_sub(merged) as f64 / 1e6;
                let _ = writeln!(text, "device part of {name} merged {ms:.1} ms ago");
            }
        }
        text
    }
}

/// The entries of `raw` when its keys and values are of 4 or 8 bytes ([`entries`]).
fn shown_entries(raw: &RawMap, key: &dyn Fn(u64) -> String) -> Option<Vec<(String, u64)>> {
    let g = raw.geometry();
    match (g.key_size, g.value_size) {
        (8, 8) => entries::<u64, u64>(raw, key),
        (8, 4) => entries::<u64, u32>(raw, key),
        (4, 8) => entries::<u32, u64>(raw, key),
        (4, 4) => entries::<u32, u32>(raw, key),
        _ => None,
    }
}

/// The entries of a hash map (keys with 8 bytes named by `key`, as kernel ids may be; narrower
/// ones as numbers) or of an array (indices, entries that are not 0), per-CPU values summed; `None`
/// for other kinds and for a map that is not of these types.
fn entries<K, V>(raw: &RawMap, key: &dyn Fn(u64) -> String) -> Option<Vec<(String, u64)>>
where
    K: bytemuck::Pod + Into<u64>,
    V: egpu_maps::Integer + Into<u64>,
{
    let g = *raw.geometry();
    let named = |k: K| if size_of::<K>() == 8 { key(k.into()) } else { k.into().to_string() };
    let nonzero = |i: u32, v: Result<V, _>| {
        v.ok().map(Into::into).filter(|&v: &u64| v != 0).map(|v| (i.to_string(), v))
    };
    Some(match g.kind {
        MapKind::Hash => HashMap::<K, V>::from_raw(raw.clone())
            .ok()?
            .iter()
            .map(|(k, v)| (named(k), v.into()))
            .collect(),
        MapKind::PerCpuHash => {
            let m = egpu_maps::PerCpuHashMap::<K, V>::from_raw(raw.clone()).ok()?;
            m.keys().into_iter().filter_map(|k| Some((named(k), m.sum(&k)?.into()))).collect()
        }
        MapKind::Array => {
            let a = Array::<V>::from_raw(raw.clone()).ok()?;
            (0..g.capacity).filter_map(|i| nonzero(i, a.get(i))).collect()
        }
        MapKind::PerCpuArray => {
            let a = egpu_maps::PerCpuArray::<V>::from_raw(raw.clone()).ok()?;
            (0..g.capacity).filter_map(|i| nonzero(i, a.sum(i))).collect()
        }
        _ => return None,
    })
}
