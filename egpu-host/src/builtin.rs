//! The built-in host probes: what egpu's preloaded library counts in every process it is loaded
//! into, the maps it keeps the counts in, and the report that reads them back (the summary a
//! process writes when it exits, `egpu maps PID` while it runs).
//!
//! The maps are placed in POSIX shared memory as `egpu-<pid>-<map>` (see [`shared_name`]), so
//! another process reads them live; a process that cannot create them keeps them in its own
//! memory. The preloaded library removes its objects when the process exits; [`clean_dead`]
//! removes those of processes that died without that.
//!
//! | map | kind | what |
//! |---|---|---|
//! | `launches` | hash, kernel id → count | launches per kernel (graph launches under `u64::MAX`, captured ones under [`CAPTURED`]) |
//! | `copies` | array of `[count, bytes]` | copies by `MemcpyCtx` kind (0–5), sets at 8 + kind |
//! | `allocations` | array of `[count, bytes]` | successful allocations (`kind`) and frees (4 + `kind`) |
//! | `syncs` | array of `[count, 0]` | synchronisations by `SyncCtx` kind |
//! | `modules` | array of `[count, bytes]` | successful module loads: 1 with PTX (its bytes), 0 other |
//! | `shapes` | array of `u64` | histograms of grid and block sizes per launch |
//! | `copy_sizes` | array of `u64` | histograms of copy sizes per direction |
//! | `health` | array of `u64` | the probe set's runs, faults, refusals, skipped fires |
//! | `sizes` | hash, address → bytes | the live allocations' sizes, for the bytes frees release |
//! | `freed` | array of one `u64` | bytes released by frees of allocations seen |
//! | `names` | hash, kernel id → name (128 bytes, NUL-padded) | kernel names, written by the library |
//! | `kernel_times` | hash, kernel id → [`KernelTime`] | GPU time per launch from CUDA events (`EGPU_KERNEL_TIMES=1`), written by the library |
//! | `kernel_timing` | array of `u64` | the event timing's counts ([`TimingCount`]) |
//! | `sync_times` | array of `u64` | histograms of the time spent in synchronisations per `SyncCtx` kind (with the kernel times) |
//! | `per_device` | array of `[count, bytes]` | per device ordinal `d` (up to 64): copies at `5d`, sets at `5d + 1`, allocations at `5d + 2`, kernel launches and their blocks at `5d + 3`, graph launches and the kernel launches' block threads at `5d + 4` |
//! | `devices` | hash, device ordinal → UUID (16 bytes) and name (80 bytes, NUL-padded) | the devices the process used ([`DeviceLabel`]), written by the library |
//!
//! The probes that fill them are Probe Rust (`builtin/probes.rs`), built and verified once per
//! process; [`Builtin::programs`] binds each one's map table, by name, to these maps. The report
//! is in `builtin/report.rs`, the metrics in `builtin/metrics.rs`.

use std::sync::{Arc, OnceLock};

use egpu_ebpf::verifier::Verified;
use egpu_ebpf::{MapDef, MapKind};
use egpu_maps::layout::Geometry;
use egpu_maps::{Array, HashMap, MapError, Placement, RawMap};
use egpu_probe::{BuildError, Probe};

use super::Health;
use crate::gpu_time::GpuTimes;

mod devices;
pub mod kept;
mod metrics;
mod probes;
mod report;
#[doc(hidden)]
pub mod sample;
pub use devices::{DEVICE_NAME_BYTES, DeviceCounts, DeviceLabel, uuid_text};
pub use metrics::{
    Histogram, Kind, Metric, MetricsOptions, Point, Value, bucket_bound, metrics, otel_key,
    otlp_json,
};
use probes::Tally;

/// The key under which the launch counts keep launches captured into graphs (which run only when
/// the graph is launched): `u64::MAX - 1`. Graph launches are under `u64::MAX`.
pub const CAPTURED: u64 = u64::MAX - 1;

/// Kernels the launch counts and the names hold at most.
pub const KERNELS: u32 = 4096;
/// Bytes of a kernel name in the names map (longer names are cut).
pub const NAME_BYTES: usize = 128;

/// Every map's name, as [`shared_name`] places it.
pub const MAPS: [&str; 16] = [
    "launches",
    "copies",
    "allocations",
    "syncs",
    "modules",
    "shapes",
    "copy_sizes",
    "health",
    "sizes",
    "freed",
    "names",
    "kernel_times",
    "kernel_timing",
    "sync_times",
    "devices",
    "per_device",
];

/// Buckets of a histogram: bucket `b` counts the values with `b` significant bits (0 for 0, 1 for
/// 1, 2 for 2–3, 3 for 4–7, …), so its upper bound is `2^b − 1`.
pub const BUCKETS: u32 = 65;

/// `copies`: copies by `MemcpyCtx` kind (0–5), sets at `8 + kind`.
const COPY_SLOTS: u32 = 16;

/// `allocations`: allocations by `AllocCtx` kind (0–2), frees at `4 + kind`.
const ALLOCATION_SLOTS: u32 = 8;

/// `syncs`: synchronisations by `SyncCtx` kind (0–3).
const SYNC_SLOTS: u32 = 4;

/// `per_device`: per device ordinal `d` (below [`devices::DEVICES`]), copies at
/// `DEVICE_SLOTS * d`, sets at `+ 1` and allocations at `+ 2` (count and bytes), kernel launches
/// at `+ 3` (count and blocks), then graph launches and the threads of the kernel launches'
/// blocks at `+ 4` (count and threads). A launch's `device` lies past its context's first 64
/// bytes: the preloaded library has it found where the probes run, from the launch's function
/// (`HostProbes::resolve_launch_devices`), so that each launch still takes one queue line.
const DEVICE_SLOTS: u32 = 5;
const PER_DEVICE_SLOTS: u32 = DEVICE_SLOTS * devices::DEVICES;

/// `modules`: module loads without PTX (0) and with (1).
const MODULE_SLOTS: u32 = 2;

/// The launch-shape histograms of the `shapes` array: grid sizes (thread blocks in the grid)
/// at `0..BUCKETS`, their sum at `BUCKETS`; block sizes (threads) from `BUCKETS + 1`, their sum
/// at `2 * BUCKETS + 1`.
const SHAPE_SLOTS: u32 = 2 * BUCKETS + 2;

/// `copy_sizes`: a histogram of copy sizes in bytes per `MemcpyCtx` kind (0–5), at
/// `kind * BUCKETS`.
const COPY_SIZE_SLOTS: u32 = 6 * BUCKETS;

/// `health`: the probe set's runs, faults, refusals and skipped fires, mirrored by its worker.
const HEALTH: u32 = 4;

/// `sync_times`: per `SyncCtx` kind (0–3), a histogram of the nanoseconds a synchronisation
/// took at `kind * (BUCKETS + 1)`, their sum after it.
const SYNC_TIME_SLOTS: u32 = SYNC_SLOTS * (BUCKETS + 1);

/// Buckets of a kernel's time histogram ([`KernelTime::buckets`]): bucket `b` counts the
/// durations of `b` significant bits in nanoseconds (up to `2^41 − 1` ns, 37 minutes; longer
/// ones count in the count and sum only).
pub const TIME_BUCKETS: usize = 41;

/// A kernel's GPU time from CUDA events: the launches timed, their nanoseconds, and a histogram
/// of them (bucket `b`: durations of `b` significant bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct KernelTime {
    /// Launches timed.
    pub count: u64,
    /// Their GPU time, in nanoseconds.
    pub sum_ns: u64,
    /// The durations' histogram (not cumulative).
    pub buckets: [u64; TIME_BUCKETS],
}

impl Default for KernelTime {
    fn default() -> KernelTime {
        bytemuck::Zeroable::zeroed()
    }
}

/// What the event timing counts in `kernel_timing`, by slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimingCount {
    /// Launches timed (their pair of events harvested).
    Timed = 0,
    /// Launches not timed: their stream was capturing (an event recorded there would become a
    /// node of the graph).
    Captured = 1,
    /// Launches not timed: every pair of events of the context was in flight.
    PoolFull = 2,
    /// Event calls that failed (the launch went on, untimed).
    Failed = 3,
    /// Launches timed whose events had not finished when their context went, or at exit.
    Lost = 4,
}

/// `kernel_timing`'s slots ([`TimingCount`]).
const TIMING_SLOTS: u32 = 8;

/// Live allocations `sizes` tracks at most (others' frees release no counted bytes).
const LIVE_ALLOCATIONS: u32 = 1 << 16;

fn def(name: &str, kind: MapKind, key_size: u32, value_size: u32, capacity: u32) -> MapDef {
    MapDef { name: name.into(), kind, key_size, value_size, capacity }
}

/// The maps, in [`MAPS`] order.
fn maps() -> [MapDef; 16] {
    let tally = size_of::<Tally>() as u32;
    [
        def("launches", MapKind::Hash, 8, 8, KERNELS),
        def("copies", MapKind::Array, 4, tally, COPY_SLOTS),
        def("allocations", MapKind::Array, 4, tally, ALLOCATION_SLOTS),
        def("syncs", MapKind::Array, 4, tally, SYNC_SLOTS),
        def("modules", MapKind::Array, 4, tally, MODULE_SLOTS),
        def("shapes", MapKind::Array, 4, 8, SHAPE_SLOTS),
        def("copy_sizes", MapKind::Array, 4, 8, COPY_SIZE_SLOTS),
        def("health", MapKind::Array, 4, 8, HEALTH),
        def("sizes", MapKind::Hash, 8, 8, LIVE_ALLOCATIONS),
        def("freed", MapKind::Array, 4, 8, 1),
        def("names", MapKind::Hash, 8, NAME_BYTES as u32, KERNELS),
        def("kernel_times", MapKind::Hash, 8, size_of::<KernelTime>() as u32, KERNELS),
        def("kernel_timing", MapKind::Array, 4, 8, TIMING_SLOTS),
        def("sync_times", MapKind::Array, 4, 8, SYNC_TIME_SLOTS),
        def("devices", MapKind::Hash, 8, devices::DEVICE_BYTES as u32, devices::DEVICES),
        def("per_device", MapKind::Array, 4, tally, PER_DEVICE_SLOTS),
    ]
}

/// The shared-memory name of process `pid`'s map `map`.
pub fn shared_name(pid: u32, map: &str) -> String {
    format!("egpu-{pid}-{map}")
}

/// Why the built-in programs could not be made (a bug: they are fixed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuiltinError {
    /// A probe does not build or verify.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A probe's map table names a map the process does not have, or one of another shape.
    #[error("probe `{probe}`: no built-in map matches its map `{map}`")]
    Unbound {
        /// The probe.
        probe: &'static str,
        /// The entry of its map table.
        map: String,
    },
}

/// A process's built-in maps.
#[derive(Clone, Debug)]
pub struct Builtin {
    /// The process they belong to.
    pub pid: u32,
    launches: RawMap,
    copies: RawMap,
    allocations: RawMap,
    syncs: RawMap,
    modules: RawMap,
    shapes: RawMap,
    copy_sizes: RawMap,
    health: RawMap,
    sizes: RawMap,
    freed: RawMap,
    names: RawMap,
    kernel_times: RawMap,
    kernel_timing: RawMap,
    sync_times: RawMap,
    devices: RawMap,
    per_device: RawMap,
    /// Its GPU time per tag and per call site (`crate::gpu_time`), once the process has made
    /// them (at its first timed launch's harvest).
    gpu_times: Arc<OnceLock<GpuTimes>>,
}

impl Builtin {
    /// Creates process `pid`'s maps, in shared memory when `shared` (falling back to process
    /// memory when shared memory cannot be had), else in process memory.
    pub fn create(pid: u32, shared: bool) -> Result<Builtin, MapError> {
        let make = |d: &MapDef| -> Result<RawMap, MapError> {
            let g = Geometry::new(d.kind, d.key_size, d.value_size, d.capacity, 1, 0)?;
            if shared {
                let name = shared_name(pid, &d.name);
                // A stale object of a dead process of the same id goes first.
                let _ = egpu_maps::unlink_shared(&name);
                if let Ok(raw) = RawMap::create(g, &Placement::Shared(name.into())) {
                    return Ok(raw);
                }
            }
            RawMap::create(g, &Placement::Process)
        };
        let maps = maps().iter().map(make).collect::<Result<Vec<_>, _>>()?;
        Ok(Builtin::from_maps(pid, maps))
    }

    /// Opens process `pid`'s maps, which it placed in shared memory.
    pub fn open(pid: u32) -> Result<Builtin, MapError> {
        let open = |d: &MapDef| -> Result<RawMap, MapError> {
            let raw = RawMap::open_shared(&shared_name(pid, &d.name))?;
            raw.expect(d.kind, d.key_size, d.value_size)?;
            Ok(raw)
        };
        let maps = maps().iter().map(open).collect::<Result<Vec<_>, _>>()?;
        Ok(Builtin::from_maps(pid, maps))
    }

    /// The maps, in [`MAPS`] order.
    fn from_maps(pid: u32, maps: Vec<RawMap>) -> Builtin {
        let [
            launches,
            copies,
            allocations,
            syncs,
            modules,
            shapes,
            copy_sizes,
            health,
            sizes,
            freed,
            names,
            kernel_times,
            kernel_timing,
            sync_times,
            devices,
            per_device,
        ] = <[RawMap; 16]>::try_from(maps).expect("one map per entry of MAPS");
        Builtin {
            pid,
            launches,
            copies,
            allocations,
            syncs,
            modules,
            shapes,
            copy_sizes,
            health,
            sizes,
            freed,
            names,
            kernel_times,
            kernel_timing,
            sync_times,
            devices,
            per_device,
            gpu_times: Arc::default(),
        }
    }

    /// The process's GPU time per tag and per call site (`egpu run --kernel-times`), opened
    /// here the first time they are there; `None` while they are not.
    pub fn gpu_times(&self) -> Option<&GpuTimes> {
        if let Some(times) = self.gpu_times.get() {
            return Some(times);
        }
        let opened = GpuTimes::open(self.pid).ok()?;
        Some(self.gpu_times.get_or_init(|| opened))
    }

    /// The map named `name` (one of [`MAPS`]).
    fn map(&self, name: &str) -> Option<&RawMap> {
        Some(match name {
            "launches" => &self.launches,
            "copies" => &self.copies,
            "allocations" => &self.allocations,
            "syncs" => &self.syncs,
            "modules" => &self.modules,
            "shapes" => &self.shapes,
            "copy_sizes" => &self.copy_sizes,
            "health" => &self.health,
            "sizes" => &self.sizes,
            "freed" => &self.freed,
            "names" => &self.names,
            "kernel_times" => &self.kernel_times,
            "kernel_timing" => &self.kernel_timing,
            "sync_times" => &self.sync_times,
            "devices" => &self.devices,
            "per_device" => &self.per_device,
            _ => return None,
        })
    }

    /// The map a probe set mirrors its health into ([`super::HostProbes::mirror_health`]).
    pub fn health_map(&self) -> &RawMap {
        &self.health
    }

    /// The probe set's health as mirrored in the `health` map.
    pub fn health(&self) -> Health {
        let at = |i| self.array(&self.health, i);
        Health { runs: at(0), faults: at(1), rejected: at(2), reentered: at(3) }
    }

    /// The built-in programs, verified (built once per process), each with these maps in the
    /// order of its map table.
    pub fn programs(&self) -> Result<Vec<(Verified, Vec<RawMap>)>, BuiltinError> {
        probes::all().into_iter().map(|probe| self.bind(probe)).collect()
    }

    /// The probes that go with the kernel times from CUDA events (`EGPU_KERNEL_TIMES=1`),
    /// attached only then, as [`programs`](Self::programs) gives them: the time spent in
    /// synchronisations, into `sync_times` (it reads the clock at the entry and exit of every
    /// synchronisation).
    pub fn timing_programs(&self) -> Result<Vec<(Verified, Vec<RawMap>)>, BuiltinError> {
        probes::timing().into_iter().map(|probe| self.bind(probe)).collect()
    }

    /// Adds a launch of kernel `id` that took `ns` nanoseconds of GPU time (from CUDA events) to
    /// `kernel_times`; false when the map is full.
    pub fn record_kernel_time(&self, id: u64, ns: u64) -> bool {
        let Ok(times) = HashMap::<u64, KernelTime>::from_raw(self.kernel_times.clone()) else {
            return false;
        };
        let bucket = (u64::BITS - ns.leading_zeros()) as usize;
        let add = |offset: usize, n: u64| times.word::<u64>(&id, offset).map(|w| w.fetch_add(n));
        let counted = add(0, 1).is_ok();
        let _ = add(8, ns);
        if bucket < TIME_BUCKETS {
            let _ = add(16 + 8 * bucket, 1);
        }
        counted
    }

    /// The kernel times from CUDA events, by kernel id, in id order.
    pub fn kernel_times(&self) -> Vec<(u64, KernelTime)> {
        let mut times: Vec<(u64, KernelTime)> =
            HashMap::<u64, KernelTime>::from_raw(self.kernel_times.clone())
                .map(|m| m.iter().collect())
                .unwrap_or_default();
        times.sort_by_key(|(id, _)| *id);
        times
    }

    /// Adds `n` to the event timing's count `what`.
    pub fn count_timing(&self, what: TimingCount, n: u64) {
        if let Ok(a) = Array::<u64>::from_raw(self.kernel_timing.clone()) {
            let _ = a.fetch_add(what as u32, n);
        }
    }

    /// The event timing's count `what`.
    pub fn timing_count(&self, what: TimingCount) -> u64 {
        self.array(&self.kernel_timing, what as u32)
    }

    /// `probe`'s program with these maps in the order of its map table: each entry bound to the
    /// map its name names (the static's name, in lowercase), which must have the entry's kind,
    /// key and value sizes and capacity.
    fn bind(&self, probe: &Probe) -> Result<(Verified, Vec<RawMap>), BuiltinError> {
        let verified = probe.verified()?;
        let mut maps = Vec::new();
        for def in verified.program().maps() {
            let shape = (def.kind, def.key_size, def.value_size, def.capacity);
            let raw = self.map(&def.name.to_ascii_lowercase()).filter(|raw| {
                let g = raw.geometry();
                (g.kind, g.key_size, g.value_size, g.capacity) == shape
            });
            let Some(raw) = raw else {
                return Err(BuiltinError::Unbound { probe: probe.name(), map: def.name.clone() });
            };
            maps.push(raw.clone());
        }
        Ok((verified.clone(), maps))
    }

    /// Records a kernel's name under its id (cut to [`NAME_BYTES`] − 1 bytes).
    pub fn record_name(&self, id: u64, name: &str) {
        let mut bytes = [0u8; NAME_BYTES];
        let n = name.len().min(NAME_BYTES - 1);
        bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
        if let Ok(names) = HashMap::<u64, [u8; NAME_BYTES]>::from_raw(self.names.clone()) {
            let _ = names.insert(&id, &bytes);
        }
    }

    /// The name recorded for a kernel id: `(unnamed)` for 0, `(graph)` for graph launches,
    /// `(captured)` for launches captured into graphs.
    pub fn name(&self, id: u64) -> String {
        match id {
            0 => "(unnamed)".into(),
            u64::MAX => "(graph)".into(),
            CAPTURED => "(captured)".into(),
            _ => HashMap::<u64, [u8; NAME_BYTES]>::from_raw(self.names.clone())
                .ok()
                .and_then(|n| n.get(&id))
                .map(|b| {
                    let end = b.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES);
                    String::from_utf8_lossy(&b[..end]).into_owned()
                })
                .unwrap_or_default(),
        }
    }

    /// Element `i` of `map`, an array of `u64` (0 when missing).
    fn array(&self, map: &RawMap, i: u32) -> u64 {
        Array::<u64>::from_raw(map.clone()).ok().and_then(|a| a.get(i).ok()).unwrap_or(0)
    }

    /// Element `i` of `map`, an array of [`Tally`] (zeros when missing).
    fn total(&self, map: &RawMap, i: u32) -> Tally {
        Array::<Tally>::from_raw(map.clone()).ok().and_then(|a| a.get(i).ok()).unwrap_or_default()
    }
}

/// Removes process `pid`'s shared objects (those that exist), its user maps' included.
pub fn unlink(pid: u32) {
    for map in MAPS
        .iter()
        .chain(&crate::sites::MAPS)
        .chain(&crate::spans::MAPS)
        .chain(&crate::gpu_time::MAPS)
    {
        let _ = egpu_maps::unlink_shared(&shared_name(pid, map));
    }
    for name in user_objects(pid) {
        let _ = egpu_maps::unlink_shared(&name);
    }
    for (_, _, name) in device_objects(pid) {
        let _ = egpu_maps::unlink_shared(&name);
    }
    kept::unmark(pid);
}

/// The shared-memory name of device `device`'s own copy of process `pid`'s user map `map`: what
/// that device's probes did to the map, apart from the other devices' (issue 29; the map
/// itself holds their sum).
pub fn device_map_name(pid: u32, device: u32, map: &str) -> String {
    format!("egpu-{pid}-ud{device}-{map}")
}

/// The shared objects of process `pid`'s per-device maps ([`device_map_name`]): each device,
/// map name and object, by device then name.
fn device_objects(pid: u32) -> Vec<(u32, String, String)> {
    let prefix = format!("egpu-{pid}-ud");
    let Ok(entries) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    let mut found: Vec<(u32, String, String)> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|object| {
            let (device, map) = object.strip_prefix(&prefix)?.split_once('-')?;
            let device = device.parse().ok()?;
            Some((device, map.to_owned(), object))
        })
        .collect();
    found.sort();
    found
}

/// The shared-memory name of process `pid`'s user map `map` (a map of the probes of a pack,
/// [`crate::pack`]).
pub fn user_map_name(pid: u32, map: &str) -> String {
    format!("egpu-{pid}-u-{map}")
}

/// The shared objects of process `pid`'s user maps.
fn user_objects(pid: u32) -> Vec<String> {
    let prefix = user_map_name(pid, "");
    let Ok(entries) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.sort();
    names
}

/// The processes that have built-in maps in shared memory (`/dev/shm/egpu-<pid>-launches`),
/// alive or not, in order.
pub fn processes() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix("egpu-")?.strip_suffix("-launches")?.parse().ok()
        })
        .collect();
    pids.sort();
    pids
}

/// Whether process `pid` exists.
pub fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes the shared objects of processes that no longer exist; how many processes' there were.
pub fn clean_dead() -> usize {
    // Not those kept for an `egpu run` that has not read them yet (`kept.rs`).
    let kept = kept::kept();
    let dead: Vec<u32> =
        processes().into_iter().filter(|&p| !alive(p) && !kept.contains(&p)).collect();
    for &pid in &dead {
        unlink(pid);
    }
    dead.len()
}
