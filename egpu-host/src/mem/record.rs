//! A recording of `egpu mem`: what the sets measured in one process, read from their maps when
//! the process ends, as JSON lines (the file extension is `.egpumem`).
//!
//! The first line is the [`Header`] (`"type":"header"`), which names the format and its
//! version, the device, the driver and the egpu that recorded it; then a line per kernel the
//! process launched (`"type":"kernel"`, [`Kernel`]), one per launch timed (`"type":"launch"`,
//! [`Launch`]) and one per site the `pattern` set saw (`"type":"site"`, [`SiteRecord`]); with the
//! `timeline` set, one per time window of a launch (`"type":"window"`, [`Window`]) and one per
//! raw record kept (`"type":"sample"`, [`Sample`]); with the `allocs` set, one per allocation
//! (`"type":"allocation"`, [`AllocationRecord`]) and one per kernel and allocation it reached
//! (`"type":"alloc_traffic"`, [`AllocUse`]), and per managed allocation and launch the pages it
//! touched first (`"type":"first_touch"`, [`FirstTouch`]). Fields and line kinds are added, never
//! renamed or removed, within a version; a reader of version 1 ignores fields it does not know.

use std::collections::BTreeMap;

use egpu_maps::{Array, HashMap, PerCpuArray, RawMap};
use serde::{Deserialize, Serialize};

use super::allocs::{AllocUse, AllocationRecord};
use super::managed::FirstTouch;
use super::pages::{Address, Page};
use super::sets::{Atomics, Reads, Requests, Site, Start, Writes};
use super::windows::{Sample, TimelineSummary, Window};

/// The format's name, in every header.
pub const FORMAT: &str = "egpu-mem";
/// The format's version.
pub const VERSION: u32 = 1;

/// Who recorded, on what.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// egpu's version and commit (`0.1.0 8fef15e1a2b3`).
    pub egpu: String,
    /// The device's name (`NVIDIA H200`); empty when no context was seen.
    pub device: String,
    /// Every device the process used, with its UUID and name (issue 29); absent: none known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<crate::builtin::DeviceLabel>,
    /// The CUDA driver's version (`13.0`).
    pub driver: String,
    /// The device's streaming multiprocessors.
    pub sms: u32,
    /// The device's peak memory bandwidth in bytes per second (memory clock × bus width × 2),
    /// 0 when the driver does not say.
    pub peak_bytes_per_second: f64,
    /// The recording process.
    pub pid: u32,
    /// Its command line.
    pub command: String,
    /// The sets that ran (`counts`, `timing`, `pattern`, `pages`).
    pub sets: Vec<String>,
    /// The bytes of the pages the `pages` set counted by (0 without it).
    #[serde(default)]
    pub page_bytes: u64,
    /// Entries the sets' maps refused, full (a kernel, page, site or address past their
    /// capacity goes uncounted), by map; absent: none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, u64>,
    /// With the `timeline` set: the sampling, the records and the rings' drops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<TimelineSummary>,
    /// What the kernel times from CUDA events did (`--kernel-times`); absent: they were off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<EventTiming>,
    /// With the `allocs` set and managed memory: whether the driver's unified-memory reports
    /// (CUPTI's) were collected, `"collected"` and how many, or why not; absent: no managed
    /// memory.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub um_reports: String,
}

/// The counts of the kernel times from CUDA events (`--kernel-times`): launches timed, and
/// those that were not, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTiming {
    /// Launches timed.
    pub timed: u64,
    /// Launches not timed: their stream was capturing a graph.
    pub captured: u64,
    /// Launches not timed: every pair of events of their context was in flight.
    pub pool_full: u64,
    /// Event calls that failed (their launches went on, untimed).
    pub failed: u64,
    /// Launches timed whose events had not finished when their context went or at exit.
    pub lost: u64,
}

/// The accesses and bytes of a kernel, every launch, by class of instruction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// `ld`/`ldu` and bulk copies from global memory, per thread.
    pub loads: u64,
    /// Their bytes.
    pub loaded: u64,
    /// `st`, bulk copies to global memory and tensor map writes.
    pub stores: u64,
    /// Their bytes.
    pub stored: u64,
    /// Atomics and reductions on global memory.
    pub atomics: u64,
    /// Their operands' bytes.
    pub atomic: u64,
    /// `cp.async` copies.
    pub asyncs: u64,
    /// The bytes they read.
    #[serde(rename = "async")]
    pub async_bytes: u64,
    /// Tensor copies from global memory.
    pub tensor_loads: u64,
    /// Their boxes' bytes.
    pub tensor_loaded: u64,
    /// Tensor copies to global memory.
    pub tensor_stores: u64,
    /// Their boxes' bytes.
    pub tensor_stored: u64,
}

impl Traffic {
    /// Bytes read from global memory, every class but atomics.
    pub fn read(&self) -> u64 {
        self.loaded.saturating_add(self.async_bytes).saturating_add(self.tensor_loaded)
    }

    /// Bytes written to global memory, every class but atomics.
    pub fn written(&self) -> u64 {
        self.stored.saturating_add(self.tensor_stored)
    }

    /// Every byte moved: read, written and the atomics' operands.
    pub fn total(&self) -> u64 {
        self.read().saturating_add(self.written()).saturating_add(self.atomic)
    }
}

/// A kernel the process launched.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// Its (mangled) name.
    pub name: String,
    /// Its id: the FNV-1a hash of the name, in hexadecimal.
    pub id: String,
    /// Launches the host saw (graph replays aside).
    pub launches: u64,
    /// Whether its module was instrumented; `false`: it ran without probes (no PTX, …), and the
    /// device's columns are unknown, not zero.
    pub instrumented: bool,
    /// Left out by `egpu mem run --kernel` (`EGPU_KERNELS`): not instrumented, by choice.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unselected: bool,
    /// What it moved, with the `counts` set.
    pub traffic: Option<Traffic>,
    /// What it moved on each device, with the `counts` set, where the probes ran on two devices
    /// or more (issue 29): each device's own copies of the set's maps; absent: one device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceTraffic>,
    /// Runs timed by the `timing` set (graph replays included).
    pub timed: u64,
    /// Their GPU time, in nanoseconds (a graph node's replays counted at its last one's time).
    pub gpu_ns: u64,
    /// Its requests' coalescing, with the `pattern` set (every site's summed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<Coalescing>,
    /// The pages it touched, with the `pages` set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pages: Option<PageUse>,
    /// Launches timed by CUDA events around them (`--kernel-times`, any kernel, instrumented or
    /// not); absent: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub event_launches: u64,
    /// Their GPU time from the events, in nanoseconds; absent: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub event_ns: u64,
    /// Registers per thread as the driver loaded it (instrumented, where it is); absent:
    /// unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub registers: u32,
    /// Bytes of local memory per thread as the driver loaded it (spills and stack); absent: none
    /// or unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub local_bytes: u32,
    /// Registers per thread of its machine code as the program brought it (a cubin's), without
    /// probes; absent: unknown (a module of PTX only, JIT compiled).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub machine_registers: u32,
}

/// What a kernel moved on one device ([`Kernel::devices`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceTraffic {
    /// The device's ordinal.
    pub device: u32,
    /// What the kernel moved there.
    pub traffic: Traffic,
}

fn is_false(b: &bool) -> bool {
    !*b
}

pub(super) fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

impl Kernel {
    /// Its GPU time in nanoseconds: the `timing` set's when it timed the kernel, else the CUDA
    /// events'.
    pub fn gpu_time_ns(&self) -> u64 {
        if self.timed > 0 { self.gpu_ns } else { self.event_ns }
    }
}

/// The pages of global memory a kernel touched, every launch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageUse {
    /// Pages touched.
    pub distinct: u64,
    /// Accesses, every page's.
    pub accesses: u64,
    /// The most accessed pages (their first byte's address), most first.
    pub hottest: Vec<Count>,
    /// The 8-byte addresses its atomics reached most, most first: where threads contend.
    pub contended: Vec<Count>,
}

/// How many times an address was reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    /// The address.
    pub address: u64,
    /// The accesses.
    pub count: u64,
}

/// Pages and addresses a kernel's entry lists.
const HOTTEST: usize = 8;

/// Warp-level requests and the 32-byte sectors they touched, against the fewest their bytes
/// could have taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coalescing {
    /// Requests: the accesses of the lanes that ran a site together.
    pub requests: u64,
    /// Lanes taking part, summed over the requests.
    pub lanes: u64,
    /// Sectors touched.
    pub sectors: u64,
    /// The fewest sectors the requests' bytes could have taken.
    pub minimum: u64,
    /// Bytes the lanes moved.
    pub bytes: u64,
    /// Requests whose lanes all reached one address (or a lane alone).
    #[serde(default)]
    pub broadcast: u64,
    /// Requests at unit stride: lanes one access's size apart.
    #[serde(default)]
    pub unit: u64,
    /// Requests at another stride, the same for all its lanes.
    #[serde(default)]
    pub strided: u64,
    /// Those strides' bytes, summed.
    #[serde(default)]
    pub stride_bytes: u64,
    /// Requests with no one stride: a gather or a scatter.
    #[serde(default)]
    pub gather: u64,
}

/// What the requests of a site mostly did, by their lanes' addresses ([`Coalescing::stride`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stride {
    /// Every lane at one address.
    Broadcast,
    /// Lanes one access's size apart.
    Unit,
    /// Lanes this many bytes apart (the mean over the strided requests).
    Bytes(f64),
    /// No one stride: a gather or a scatter.
    Gather,
}

impl Coalescing {
    /// The stride class most of the requests had, and their share; `None` for a recording made
    /// before egpu classed strides.
    pub fn stride(&self) -> Option<(Stride, f64)> {
        let classes = [
            (Stride::Broadcast, self.broadcast),
            (Stride::Unit, self.unit),
            (Stride::Bytes(self.stride_bytes as f64 / self.strided.max(1) as f64), self.strided),
            (Stride::Gather, self.gather),
        ];
        let total: u64 = classes.iter().map(|c| c.1).sum();
        let (class, n) = classes.into_iter().max_by_key(|c| c.1)?;
        (total > 0).then(|| (class, n as f64 / total as f64))
    }

    /// Sectors per request.
    pub fn sectors_per_request(&self) -> f64 {
        self.sectors as f64 / self.requests.max(1) as f64
    }

    /// The fewest sectors over those touched: 1 when fully coalesced.
    pub fn efficiency(&self) -> f64 {
        if self.sectors == 0 { 1.0 } else { self.minimum as f64 / self.sectors as f64 }
    }

    fn add(&mut self, r: &Requests) {
        self.requests = self.requests.saturating_add(r.requests);
        self.lanes = self.lanes.saturating_add(r.lanes);
        self.sectors = self.sectors.saturating_add(r.sectors);
        self.minimum = self.minimum.saturating_add(r.minimum);
        self.bytes = self.bytes.saturating_add(r.bytes);
        self.broadcast = self.broadcast.saturating_add(r.broadcast);
        self.unit = self.unit.saturating_add(r.unit);
        self.strided = self.strided.saturating_add(r.strided);
        self.stride_bytes = self.stride_bytes.saturating_add(r.stride_bytes);
        self.gather = self.gather.saturating_add(r.gather);
    }
}

/// A site of a kernel the `pattern` set saw.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SiteRecord {
    /// The kernel's id, in hexadecimal.
    pub kernel: String,
    /// The access's index among the kernel's observed accesses.
    pub site: u32,
    /// Its class ([`MemAccessCtx::class`](egpu_ebpf::MemAccessCtx::class)).
    pub class: u32,
    /// The PTX line of its instruction, where egpu kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// What it does: `load`, `store` or `atomic`, where egpu kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
    /// What its requests did.
    #[serde(flatten)]
    pub requests: Coalescing,
}

/// What the process saw besides the maps, for [`Recording::collect`].
#[allow(missing_debug_implementations)]
pub struct Seen<'a> {
    /// The kernels the host saw launched: id, launches, name.
    pub launched: &'a [(u64, u64, String)],
    /// Whether the kernel of this id was instrumented.
    pub instrumented: &'a dyn Fn(u64) -> bool,
    /// The name of the kernel of this id.
    pub name: &'a dyn Fn(u64) -> String,
    /// The PTX line of a kernel's site, and what it does (`load`, `store`, `atomic`).
    pub site: &'a dyn Fn(u64, u32) -> Option<(u32, &'static str)>,
}

/// A launch timed by the `timing` set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// Its `%gridid`: unique in its context, growing with the launches.
    pub grid: u64,
    /// The kernel's id, in hexadecimal.
    pub kernel: String,
    /// `%globaltimer` when the first thread of block 0 started, in nanoseconds.
    pub start_ns: u64,
    /// The latest end of a block's first thread, in nanoseconds.
    pub end_ns: u64,
    /// Blocks in the grid.
    pub blocks: u64,
    /// Threads per block.
    pub threads: u64,
    /// Times it ran: more than 1 for a CUDA graph's kernel node (every replay has the node's
    /// grid id), whose times are then the last replay's.
    #[serde(default = "one")]
    pub runs: u64,
}

fn one() -> u64 {
    1
}

impl Launch {
    /// Its GPU time in nanoseconds.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// One line of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Line {
    Header(Header),
    Kernel(Kernel),
    Launch(Launch),
    Site(SiteRecord),
    Window(Window),
    Sample(Sample),
    Allocation(AllocationRecord),
    #[serde(rename = "alloc_traffic")]
    AllocTraffic(AllocUse),
    #[serde(rename = "first_touch")]
    FirstTouch(FirstTouch),
}

/// What one process recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    /// Who recorded, on what.
    pub header: Header,
    /// The kernels, most GPU time first, then most bytes, then most launches.
    pub kernels: Vec<Kernel>,
    /// The launches timed, by grid id.
    pub launches: Vec<Launch>,
    /// The sites the `pattern` set saw, least coalesced first.
    pub sites: Vec<SiteRecord>,
    /// The `timeline` set's windows, by kernel, launch and time.
    pub windows: Vec<Window>,
    /// The `timeline` set's raw records kept, by time.
    pub samples: Vec<Sample>,
    /// The program's device allocations, in the order made (the `allocs` set).
    pub allocations: Vec<AllocationRecord>,
    /// The `allocs` set's accesses per kernel and allocation.
    pub alloc_traffic: Vec<AllocUse>,
    /// The `allocs` set's first touches of managed memory, by allocation and launch.
    pub first_touches: Vec<FirstTouch>,
}

/// Why a recording could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordingError {
    /// Nothing in it.
    #[error("an empty recording: an egpu-mem recording starts with its header line")]
    Empty,
    /// The first line is not a header.
    #[error(
        "line 1 is not an egpu-mem header (`{{\"type\":\"header\",\"format\":\"egpu-mem\",...}}`)"
    )]
    NoHeader,
    /// A version this egpu does not read.
    #[error("egpu-mem version {found}; this egpu reads version {VERSION}")]
    Version {
        /// The version found.
        found: u32,
    },
    /// A line that is not a record.
    #[error("line {line}: {reason}")]
    Line {
        /// The line (from 1).
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// The kinds of line this egpu reads.
const KINDS: [&str; 9] = [
    "header",
    "kernel",
    "launch",
    "site",
    "window",
    "sample",
    "allocation",
    "alloc_traffic",
    "first_touch",
];

/// Whether `text` is a JSON object whose `type` is a string this egpu does not know (a kind a
/// later egpu writes within version 1).
fn later_kind(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(|t| !KINDS.contains(&t)))
        .unwrap_or(false)
}

/// The hexadecimal form of a kernel id.
pub fn kernel_hex(id: u64) -> String {
    format!("{id:016x}")
}

impl Recording {
    /// Adds what each kernel moved on `device` ([`Kernel::devices`]) from `maps`, that device's
    /// own copies of the `counts` set's maps (`READS`, `WRITES`, `ATOMICS`), by name.
    pub fn add_device_traffic(&mut self, device: u32, maps: &[(String, RawMap)], seen: &Seen<'_>) {
        let only = Seen { launched: &[], ..*seen };
        let on = Recording::collect(Header::default(), maps, &only);
        for k in on.kernels {
            let Some(traffic) = k.traffic else { continue };
            match self.kernels.iter_mut().find(|m| m.id == k.id) {
                Some(m) => m.devices.push(DeviceTraffic { device, traffic }),
                None => {
                    let devices = vec![DeviceTraffic { device, traffic }];
                    self.kernels.push(Kernel { devices, traffic: None, ..k });
                }
            }
        }
    }

    /// Reads what the sets' maps hold (`maps`, by the names the sets gave them), for the
    /// kernels the host saw launched ([`Seen`]); kernels the maps hold and the host did not
    /// launch (graph replays) are named by `seen.name`.
    pub fn collect(mut header: Header, maps: &[(String, RawMap)], seen: &Seen<'_>) -> Recording {
        const SETS_MAPS: [&str; 10] = [
            "READS",
            "WRITES",
            "ATOMICS",
            "STARTS",
            "RUNS",
            "SITES",
            "PAGES",
            "CONTENDED",
            "ALLOC_TRAFFIC",
            "FIRST_TOUCH",
        ];
        header.refused = maps
            .iter()
            .filter(|(name, _)| SETS_MAPS.contains(&name.as_str()))
            .map(|(name, raw)| (name.clone(), raw.refused()))
            .filter(|(_, n)| *n > 0)
            .collect();
        let (launched, instrumented, name) = (seen.launched, seen.instrumented, seen.name);
        let map = |n: &str| maps.iter().find(|(m, _)| m == n).map(|(_, raw)| raw.clone());
        let mut kernels: BTreeMap<u64, Kernel> = BTreeMap::new();
        fn kernel<'k>(
            kernels: &'k mut BTreeMap<u64, Kernel>,
            id: u64,
            name: impl FnOnce() -> String,
            instrumented: &dyn Fn(u64) -> bool,
        ) -> &'k mut Kernel {
            kernels.entry(id).or_insert_with(|| Kernel {
                name: name(),
                id: kernel_hex(id),
                instrumented: instrumented(id),
                ..Kernel::default()
            })
        }
        for (id, n, named) in launched {
            let k = kernel(&mut kernels, *id, || named.clone(), instrumented);
            k.launches = k.launches.saturating_add(*n);
        }
        let reads = map("READS").and_then(|raw| HashMap::<u64, Reads>::from_raw(raw).ok());
        let writes = map("WRITES").and_then(|raw| HashMap::<u64, Writes>::from_raw(raw).ok());
        let atomics = map("ATOMICS").and_then(|raw| HashMap::<u64, Atomics>::from_raw(raw).ok());
        if let (Some(reads), Some(writes), Some(atomics)) = (reads, writes, atomics) {
            for (id, r) in reads.iter() {
                let k = kernel(&mut kernels, id, || name(id), instrumented);
                let t = k.traffic.get_or_insert_with(Traffic::default);
                (t.loads, t.loaded, t.asyncs, t.async_bytes) =
                    (r.loads, r.loaded, r.asyncs, r.async_bytes);
                (t.tensor_loads, t.tensor_loaded) = (r.tensor_loads, r.tensor_loaded);
            }
            for (id, w) in writes.iter() {
                let k = kernel(&mut kernels, id, || name(id), instrumented);
                let t = k.traffic.get_or_insert_with(Traffic::default);
                (t.stores, t.stored, t.tensor_stores, t.tensor_stored) =
                    (w.stores, w.stored, w.tensor_stores, w.tensor_stored);
            }
            for (id, a) in atomics.iter() {
                let k = kernel(&mut kernels, id, || name(id), instrumented);
                let t = k.traffic.get_or_insert_with(Traffic::default);
                (t.atomics, t.atomic) = (a.atomics, a.atomic);
            }
            // An instrumented kernel that moved nothing moved nothing (it is not unknown).
            for k in kernels.values_mut().filter(|k| k.instrumented) {
                k.traffic.get_or_insert_with(Traffic::default);
            }
        }
        let mut launches = Vec::new();
        let starts = map("STARTS").and_then(|raw| Array::<Start>::from_raw(raw).ok());
        let ends = map("ENDS").and_then(|raw| PerCpuArray::<u64>::from_raw(raw).ok());
        let runs = map("RUNS").and_then(|raw| HashMap::<u64, u64>::from_raw(raw).ok());
        if let (Some(starts), Some(ends)) = (starts, ends) {
            for (slot, s) in starts.to_vec().into_iter().enumerate() {
                // A slot no launch reached, or one whose blocks ended before it began (an
                // earlier launch's, at the same slot).
                let Ok(per_sm) = ends.get(slot as u32) else { continue };
                // Device writers' shards, and the host's (the CPU VM's, in tests).
                let all = per_sm.sm.into_iter().chain(per_sm.cpu);
                let end = all.filter(|&e| e >= s.start).max();
                let (Some(end), true) = (end, s.start > 0) else { continue };
                let launch = Launch {
                    grid: s.grid,
                    kernel: kernel_hex(s.kernel),
                    start_ns: s.start,
                    end_ns: end,
                    blocks: s.blocks,
                    threads: s.threads,
                    runs: runs.as_ref().and_then(|r| r.get(&s.grid)).unwrap_or(1).max(1),
                };
                let k = kernel(&mut kernels, s.kernel, || name(s.kernel), instrumented);
                k.timed = k.timed.saturating_add(launch.runs);
                k.gpu_ns =
                    k.gpu_ns.saturating_add(launch.duration_ns().saturating_mul(launch.runs));
                launches.push(launch);
            }
        }
        launches.sort_by_key(|l| l.grid);
        let page_bytes = header.page_bytes.max(1);
        if let Some(pages) = map("PAGES").and_then(|raw| HashMap::<Page, u64>::from_raw(raw).ok()) {
            let mut by_kernel: BTreeMap<u64, Vec<Count>> = BTreeMap::new();
            for (p, count) in pages.iter() {
                let address = p.page.saturating_mul(page_bytes);
                by_kernel.entry(p.kernel).or_default().push(Count { address, count });
            }
            let contended = map("CONTENDED")
                .and_then(|raw| HashMap::<Address, u64>::from_raw(raw).ok())
                .map(|m| m.iter().collect::<Vec<_>>())
                .unwrap_or_default();
            for (id, mut counts) in by_kernel {
                counts.sort_by_key(|c| (std::cmp::Reverse(c.count), c.address));
                let mut atomics: Vec<Count> = contended
                    .iter()
                    .filter(|(a, _)| a.kernel == id)
                    .map(|(a, count)| Count { address: a.addr, count: *count })
                    .collect();
                atomics.sort_by_key(|c| (std::cmp::Reverse(c.count), c.address));
                atomics.truncate(HOTTEST);
                let k = kernel(&mut kernels, id, || name(id), instrumented);
                k.pages = Some(PageUse {
                    distinct: counts.len() as u64,
                    accesses: counts.iter().fold(0u64, |a, c| a.saturating_add(c.count)),
                    hottest: counts.into_iter().take(HOTTEST).collect(),
                    contended: atomics,
                });
            }
        }
        let mut sites = Vec::new();
        if let Some(map) =
            map("SITES").and_then(|raw| HashMap::<Site, Requests>::from_raw(raw).ok())
        {
            for (s, r) in map.iter() {
                let k = kernel(&mut kernels, s.kernel, || name(s.kernel), instrumented);
                k.pattern.get_or_insert_with(Coalescing::default).add(&r);
                let mut requests = Coalescing::default();
                requests.add(&r);
                let (kernel, site, class) = (kernel_hex(s.kernel), s.site, s.class);
                let (line, access) = match (seen.site)(s.kernel, s.site) {
                    Some((line, access)) => (Some(line), Some(access.to_owned())),
                    None => (None, None),
                };
                sites.push(SiteRecord { kernel, site, class, line, access, requests });
            }
        }
        sites.sort_by(|a, b| {
            let key = |s: &SiteRecord| (s.requests.efficiency(), s.kernel.clone(), s.site);
            key(a).partial_cmp(&key(b)).unwrap_or(std::cmp::Ordering::Equal)
        });
        let mut kernels: Vec<Kernel> = kernels.into_values().collect();
        kernels.sort_by_key(|k| {
            let bytes = k.traffic.map_or(0, |t| t.total());
            (std::cmp::Reverse(k.gpu_ns), std::cmp::Reverse(bytes), std::cmp::Reverse(k.launches))
        });
        let alloc_traffic = map("ALLOC_TRAFFIC").map(super::allocs::uses).unwrap_or_default();
        Recording { header, kernels, launches, sites, alloc_traffic, ..Recording::default() }
    }

    /// Adds the GPU time CUDA events measured (`--kernel-times`): `times` holds, per kernel id,
    /// the launches timed and their nanoseconds (a kernel not listed yet is added, named by
    /// `name`, not instrumented unless `instrumented` says so); `counts` goes to the header. The
    /// kernels are sorted again, most GPU time first ([`Kernel::gpu_time_ns`]).
    pub fn add_event_times(
        &mut self,
        times: &[(u64, u64, u64)],
        counts: EventTiming,
        seen: &Seen<'_>,
    ) {
        self.header.events = Some(counts);
        for &(id, launches, ns) in times {
            let hex = kernel_hex(id);
            let at = match self.kernels.iter().position(|k| k.id == hex) {
                Some(at) => at,
                None => {
                    self.kernels.push(Kernel {
                        name: (seen.name)(id),
                        id: hex,
                        instrumented: (seen.instrumented)(id),
                        ..Kernel::default()
                    });
                    self.kernels.len() - 1
                }
            };
            let k = &mut self.kernels[at];
            k.event_launches = k.event_launches.saturating_add(launches);
            k.event_ns = k.event_ns.saturating_add(ns);
        }
        self.kernels.sort_by_key(|k| {
            let bytes = k.traffic.map_or(0, |t| t.total());
            let time = std::cmp::Reverse(k.gpu_time_ns());
            (time, std::cmp::Reverse(bytes), std::cmp::Reverse(k.launches))
        });
    }

    /// The recording as JSON lines, each ending with a newline.
    pub fn to_jsonl(&self) -> String {
        let mut text = String::new();
        let mut line = |l: Line| {
            // Serialising these types cannot fail: no maps with non-string keys, no I/O.
            text.push_str(&serde_json::to_string(&l).unwrap_or_default());
            text.push('\n');
        };
        line(Line::Header(self.header.clone()));
        self.kernels.iter().for_each(|k| line(Line::Kernel(k.clone())));
        self.launches.iter().for_each(|l| line(Line::Launch(l.clone())));
        self.sites.iter().for_each(|s| line(Line::Site(s.clone())));
        self.windows.iter().for_each(|w| line(Line::Window(w.clone())));
        self.samples.iter().for_each(|s| line(Line::Sample(s.clone())));
        self.allocations.iter().for_each(|a| line(Line::Allocation(a.clone())));
        self.alloc_traffic.iter().for_each(|a| line(Line::AllocTraffic(a.clone())));
        self.first_touches.iter().for_each(|t| line(Line::FirstTouch(t.clone())));
        text
    }

    /// Reads a recording written by [`Recording::to_jsonl`] (blank lines are skipped).
    pub fn parse(text: &str) -> Result<Recording, RecordingError> {
        let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
        let Some((_, first)) = lines.next() else { return Err(RecordingError::Empty) };
        let header = match serde_json::from_str::<Line>(first) {
            Ok(Line::Header(h)) if h.format == FORMAT => h,
            _ => {
                // A header of another version may not parse as this one's: its version first.
                let v: Option<u32> = serde_json::from_str::<serde_json::Value>(first)
                    .ok()
                    .filter(|v| v["format"] == FORMAT)
                    .and_then(|v| v["version"].as_u64())
                    .and_then(|v| u32::try_from(v).ok());
                return Err(match v {
                    Some(found) if found != VERSION => RecordingError::Version { found },
                    _ => RecordingError::NoHeader,
                });
            }
        };
        if header.version != VERSION {
            return Err(RecordingError::Version { found: header.version });
        }
        let mut recording = Recording { header, ..Recording::default() };
        for (i, text) in lines {
            let at = |reason: String| RecordingError::Line { line: i + 1, reason };
            let line = match serde_json::from_str::<Line>(text) {
                Ok(line) => line,
                // A kind of line a later egpu writes: skipped.
                Err(_) if later_kind(text) => continue,
                Err(e) => return Err(at(e.to_string())),
            };
            match line {
                Line::Header(_) => return Err(at("a second header".into())),
                Line::Kernel(k) => recording.kernels.push(k),
                Line::Launch(l) => recording.launches.push(l),
                Line::Site(s) => recording.sites.push(s),
                Line::Window(w) => recording.windows.push(w),
                Line::Sample(s) => recording.samples.push(s),
                Line::Allocation(a) => recording.allocations.push(a),
                Line::AllocTraffic(a) => recording.alloc_traffic.push(a),
                Line::FirstTouch(t) => recording.first_touches.push(t),
            }
        }
        Ok(recording)
    }
}
