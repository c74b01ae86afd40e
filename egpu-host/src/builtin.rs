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

use std::fmt::Write as _;

use egpu_ebpf::verifier::{Verified, VerifyError, verify};
use egpu_ebpf::{
    AsmError, AttachPoint, HostEvent, MapDef, MapKind, Phase, Program, ProgramError, assemble,
};
use egpu_maps::layout::Geometry;
use egpu_maps::{Array, HashMap, MapError, Placement, RawMap};

use super::Health;

mod metrics;
pub use metrics::{otlp_json, prometheus};

/// The key under which the launch counts keep launches captured into graphs (which run only when
/// the graph is launched): `u64::MAX - 1`. Graph launches are under `u64::MAX`.
pub const CAPTURED: u64 = u64::MAX - 1;

/// Kernels the launch counts and the names hold at most.
pub const KERNELS: u32 = 4096;
/// Bytes of a kernel name in the names map (longer names are cut).
pub const NAME_BYTES: usize = 128;

/// A program that counts by the 64-bit key in `r6`, which `$prelude` loads from the context
/// (`r1`), in map 0, a hash of `u64` counts: look up and add; when missing, insert 1 (unless
/// another thread just did: then look up again and add).
macro_rules! count_by_r6 {
    ($prelude:literal) => {
        concat!(
            $prelude,
            "
    stxdw [%r10-8], %r6
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, missing
    mov %r1, 1
    lock add [%r0+0], %r1
    ja out
missing:
    stdw [%r10-16], 1
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r3, %r10
    add %r3, -16
    mov %r4, 1
    call 2
    jeq %r0, 0, out
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, out
    mov %r1, 1
    lock add [%r0+0], %r1
out:
    mov %r0, 0
    exit"
        )
    };
}

/// Counts a launch per kernel id (`LaunchCtx::kernel_id`) in map 0, launches captured into a
/// graph ([`LaunchCtx::CAPTURED`](egpu_ebpf::LaunchCtx::CAPTURED)) under [`CAPTURED`].
pub const COUNT_LAUNCHES: &str = count_by_r6!(
    "
    ldxdw %r6, [%r1+0]
    ldxw %r7, [%r1+32]
    and %r7, 1
    jeq %r7, 0, keyed
    mov %r6, -2
keyed:"
);

/// Counts events by their context's first 8 bytes, as [`COUNT_LAUNCHES`] counts kernels.
#[cfg(test)]
pub(crate) const COUNT_BY_FIRST_WORD: &str = count_by_r6!(
    "
    ldxdw %r6, [%r1+0]"
);

/// Adds 1 and `r6` (bytes) to element `r2` of map 0, an array of `[count, bytes]`; the probes
/// ahead of it jump to `out` to count nothing.
const ADD_COUNT_AND_BYTES: &str = "
    stxw [%r10-4], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    mov %r1, 1
    lock add [%r0+0], %r1
    lock add [%r0+8], %r6
out:
    mov %r0, 0
    exit";

/// Copies and sets (`host::memcpy::enter`): element `kind` (`MemcpyCtx::kind`, byte 48) for
/// copies, `8 + kind` for sets (`MemcpyCtx::MEMSET` in `flags`, byte 64); bytes from byte 16.
const COUNT_COPIES: &str = "
    ldxdw %r6, [%r1+16]
    ldxw %r2, [%r1+48]
    ldxw %r3, [%r1+64]
    and %r3, 2
    jeq %r3, 0, +1
    add %r2, 8";

/// Allocations and frees that succeeded (`host::alloc::exit`, `AllocCtx::result` at byte 48):
/// element `op * 4 + kind` (`op` at byte 36, `kind` at 32); bytes from byte 8.
const COUNT_ALLOCS: &str = "
    ldxw %r2, [%r1+48]
    jne %r2, 0, out
    ldxdw %r6, [%r1+8]
    ldxw %r2, [%r1+32]
    ldxw %r3, [%r1+36]
    lsh %r3, 2
    add %r2, %r3";

/// Synchronisations (`host::sync::enter`): element `kind` (`SyncCtx::kind`, byte 24).
const COUNT_SYNCS: &str = "
    mov %r6, 0
    ldxw %r2, [%r1+24]";

/// Module loads that succeeded (`host::module_load::exit`, `result` at byte 48): element
/// `has_ptx` (byte 32); image bytes from byte 8.
const COUNT_MODULES: &str = "
    ldxw %r2, [%r1+48]
    jne %r2, 0, out
    ldxdw %r6, [%r1+8]
    ldxw %r2, [%r1+32]";

/// The maps of the built-in probes other than `launches` and `names`, with their event, phase,
/// program (ahead of [`ADD_COUNT_AND_BYTES`]) and elements.
const TOTALS: [(&str, HostEvent, Phase, &str, u32); 4] = [
    ("copies", HostEvent::Memcpy, Phase::Enter, COUNT_COPIES, 16),
    ("allocations", HostEvent::Alloc, Phase::Exit, COUNT_ALLOCS, 8),
    ("syncs", HostEvent::Sync, Phase::Enter, COUNT_SYNCS, 4),
    ("modules", HostEvent::ModuleLoad, Phase::Exit, COUNT_MODULES, 2),
];

/// Every map's name, as [`shared_name`] places it.
pub const MAPS: [&str; 11] = [
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
];

/// Buckets of a histogram: bucket `b` counts the values with `b` significant bits (0 for 0, 1 for
/// 1, 2 for 2–3, 3 for 4–7, …), so its upper bound is `2^b − 1`.
pub const BUCKETS: u32 = 65;

/// The launch-shape histograms of the `shapes` array: grid sizes (threads blocks in the grid)
/// at `0..BUCKETS`, their sum at `BUCKETS`; block sizes (threads) from `BUCKETS + 1`, their sum
/// at `2 * BUCKETS + 1`.
const SHAPES: u32 = 2 * BUCKETS + 2;

/// `copy_sizes`: a histogram of copy sizes in bytes per `MemcpyCtx` kind (0–5), at
/// `kind * BUCKETS`.
const COPY_SIZES: u32 = 6 * BUCKETS;

/// `health`: the probe set's runs, faults, refusals and skipped fires, mirrored by its worker.
const HEALTH: u32 = 4;

/// Live allocations `sizes` tracks at most (others' frees release no counted bytes).
const ALLOCATIONS: u32 = 1 << 16;

/// `host::alloc::exit`: a successful allocation's size under its address in map 0; a successful
/// free's size, found there, added to map 1 and the address removed.
const TRACK_FREES: &str = "
    ldxw %r2, [%r1+48]
    jne %r2, 0, out
    ldxdw %r6, [%r1+0]
    stxdw [%r10-8], %r6
    ldxdw %r7, [%r1+8]
    ldxw %r3, [%r1+36]
    jeq %r3, 1, free
    stxdw [%r10-16], %r7
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r3, %r10
    add %r3, -16
    mov %r4, 0
    call 2
    ja out
free:
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, out
    ldxdw %r7, [%r0+0]
    stw [%r10-20], 0
    lddw %r1, map[1]
    mov %r2, %r10
    add %r2, -20
    call 1
    jeq %r0, 0, forget
    lock add [%r0+0], %r7
forget:
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 3
out:
    mov %r0, 0
    exit";

/// Appends to `text` the eBPF that sets `r8` to the number of significant bits of `r7` (uses
/// `r3`, `r9`).
fn bucket_of_r7(text: &mut String) {
    text.push_str("    mov %r8, 0\n    mov %r9, %r7\n");
    for shift in [32, 16, 8, 4, 2, 1] {
        let _ = write!(
            text,
            "    mov %r3, %r9\n    rsh %r3, {shift}\n    jeq %r3, 0, +2\n    add %r8, {shift}\n    mov %r9, %r3\n"
        );
    }
    text.push_str("    add %r8, %r9\n");
}

/// Appends to `text` the eBPF that adds `value` (a register or a number) to element `index` (a
/// register or a number) of map 0, an array of `u64`.
fn add_to(text: &mut String, index: &str, value: &str, label: &mut u32) {
    *label += 1;
    let store = if index.starts_with('%') {
        format!("stxw [%r10-4], {index}")
    } else {
        format!("stw [%r10-4], {index}")
    };
    let add = if value.starts_with('%') {
        format!("lock add [%r0+0], {value}")
    } else {
        format!("mov %r1, {value}\n    lock add [%r0+0], %r1")
    };
    let _ = write!(
        text,
        "    {store}\n    lddw %r1, map[0]\n    mov %r2, %r10\n    add %r2, -4\n    call 1\n    jeq %r0, 0, skip{label}\n    {add}\nskip{label}:\n"
    );
}

/// `host::launch::enter`: the grid's blocks and the block's threads into their histograms (not
/// for graph launches, whose kernel id is `u64::MAX`, nor for launches captured into graphs).
fn launch_shapes() -> String {
    let mut text = String::from(
        "    ldxdw %r3, [%r1+0]\n    jeq %r3, -1, out\n    ldxw %r3, [%r1+32]\n    and %r3, 1\n    jne %r3, 0, out\n    ldxw %r7, [%r1+40]\n    ldxw %r3, [%r1+44]\n    mul %r7, %r3\n    ldxw %r3, [%r1+48]\n    mul %r7, %r3\n\
         \x20   ldxw %r6, [%r1+52]\n    ldxw %r3, [%r1+56]\n    mul %r6, %r3\n    ldxw %r3, [%r1+60]\n    mul %r6, %r3\n",
    );
    let mut label = 0;
    bucket_of_r7(&mut text);
    add_to(&mut text, "%r8", "1", &mut label);
    add_to(&mut text, &BUCKETS.to_string(), "%r7", &mut label);
    text.push_str("    mov %r7, %r6\n");
    bucket_of_r7(&mut text);
    let _ = writeln!(text, "    add %r8, {}", BUCKETS + 1);
    add_to(&mut text, "%r8", "1", &mut label);
    add_to(&mut text, &(2 * BUCKETS + 1).to_string(), "%r7", &mut label);
    text.push_str("out:\n    mov %r0, 0\n    exit\n");
    text
}

/// `host::memcpy::enter`: a copy's bytes (byte 16) into its kind's (byte 48) histogram; sets
/// (`MEMSET` in `flags`, byte 64) are left out.
fn copy_sizes() -> String {
    let mut text = String::from(
        "    ldxw %r3, [%r1+64]\n    and %r3, 2\n    jne %r3, 0, out\n    ldxdw %r7, [%r1+16]\n    ldxw %r6, [%r1+48]\n",
    );
    let mut label = 0;
    bucket_of_r7(&mut text);
    let _ = writeln!(text, "    mul %r6, {BUCKETS}\n    add %r8, %r6");
    add_to(&mut text, "%r8", "1", &mut label);
    text.push_str("out:\n    mov %r0, 0\n    exit\n");
    text
}

/// The shared-memory name of process `pid`'s map `map`.
pub fn shared_name(pid: u32, map: &str) -> String {
    format!("egpu-{pid}-{map}")
}

/// Why the built-in programs could not be made (a bug: their texts are fixed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuiltinError {
    /// A text does not assemble.
    #[error(transparent)]
    Asm(#[from] AsmError),
    /// A program is not well formed.
    #[error(transparent)]
    Program(#[from] ProgramError),
    /// The verifier refused a program.
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

/// A process's built-in maps.
#[derive(Clone, Debug)]
pub struct Builtin {
    /// The process they belong to.
    pub pid: u32,
    launches: RawMap,
    /// In [`TOTALS`] order.
    totals: Vec<RawMap>,
    shapes: RawMap,
    copy_sizes: RawMap,
    health: RawMap,
    sizes: RawMap,
    freed: RawMap,
    names: RawMap,
}

fn def(name: &str, kind: MapKind, key_size: u32, value_size: u32, capacity: u32) -> MapDef {
    MapDef { name: name.into(), kind, key_size, value_size, capacity }
}

fn maps() -> Vec<MapDef> {
    let mut maps = vec![def("launches", MapKind::Hash, 8, 8, KERNELS)];
    maps.extend(TOTALS.iter().map(|t| def(t.0, MapKind::Array, 4, 16, t.4)));
    maps.push(def("shapes", MapKind::Array, 4, 8, SHAPES));
    maps.push(def("copy_sizes", MapKind::Array, 4, 8, COPY_SIZES));
    maps.push(def("health", MapKind::Array, 4, 8, HEALTH));
    maps.push(def("sizes", MapKind::Hash, 8, 8, ALLOCATIONS));
    maps.push(def("freed", MapKind::Array, 4, 8, 1));
    maps.push(def("names", MapKind::Hash, 8, NAME_BYTES as u32, KERNELS));
    maps
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
        let defs = maps();
        let maps = defs
            .iter()
            .map(|d| {
                let raw = RawMap::open_shared(&shared_name(pid, &d.name))?;
                raw.expect(d.kind, d.key_size, d.value_size)?;
                Ok(raw)
            })
            .collect::<Result<Vec<_>, MapError>>()?;
        Ok(Builtin::from_maps(pid, maps))
    }

    fn from_maps(pid: u32, mut maps: Vec<RawMap>) -> Builtin {
        let names = maps.pop().expect("the names map");
        let freed = maps.pop().expect("the freed bytes");
        let sizes = maps.pop().expect("the allocations' sizes");
        let health = maps.pop().expect("the health map");
        let copy_sizes = maps.pop().expect("the copy sizes");
        let shapes = maps.pop().expect("the shapes");
        let launches = maps.remove(0);
        Builtin { pid, launches, totals: maps, shapes, copy_sizes, health, sizes, freed, names }
    }

    /// The map a probe set mirrors its health into ([`super::HostProbes::mirror_health`]).
    pub fn health_map(&self) -> &RawMap {
        &self.health
    }

    /// The probe set's health as mirrored in the `health` map.
    pub fn health(&self) -> Health {
        let at = |i| {
            Array::<u64>::from_raw(self.health.clone())
                .ok()
                .and_then(|a| a.get(i).ok())
                .unwrap_or(0)
        };
        Health { runs: at(0), faults: at(1), rejected: at(2), reentered: at(3) }
    }

    /// The built-in programs, verified, each with the maps of its map table.
    pub fn programs(&self) -> Result<Vec<(Verified, Vec<RawMap>)>, BuiltinError> {
        let defs = maps();
        let mut programs = Vec::new();
        let attach = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
        let launches = Program::new(assemble(COUNT_LAUNCHES)?, vec![defs[0].clone()], attach)?;
        programs.push((launches, vec![self.launches.clone()]));
        for (i, (_, event, phase, text, _)) in TOTALS.iter().enumerate() {
            let text = format!("{text}{ADD_COUNT_AND_BYTES}");
            let attach = AttachPoint::Host(*event, *phase);
            let program = Program::new(assemble(&text)?, vec![defs[1 + i].clone()], attach)?;
            programs.push((program, vec![self.totals[i].clone()]));
        }
        let shapes = Program::new(assemble(&launch_shapes())?, vec![defs[5].clone()], attach)?;
        programs.push((shapes, vec![self.shapes.clone()]));
        let memcpy = AttachPoint::Host(HostEvent::Memcpy, Phase::Enter);
        let sizes = Program::new(assemble(&copy_sizes())?, vec![defs[6].clone()], memcpy)?;
        programs.push((sizes, vec![self.copy_sizes.clone()]));
        let alloc = AttachPoint::Host(HostEvent::Alloc, Phase::Exit);
        let table = vec![defs[8].clone(), defs[9].clone()];
        let frees = Program::new(assemble(TRACK_FREES)?, table, alloc)?;
        programs.push((frees, vec![self.sizes.clone(), self.freed.clone()]));
        programs.into_iter().map(|(p, maps)| Ok((verify(&p)?, maps))).collect()
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

    /// What the maps hold, as lines (counts that are 0 left out; `shapes`: the blocks of the
    /// launched grids and the threads of their blocks, summed); with `health`, a last line of
    /// the probes' runs, faults and refusals:
    ///
    /// ```text
    /// pid 711
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
        let mut kernels: Vec<(u64, u64)> = HashMap::<u64, u64>::from_raw(self.launches.clone())
            .map(|m| m.iter().collect())
            .unwrap_or_default();
        kernels.sort();
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
        let element = |map: usize, i: u32| -> [u64; 2] {
            Array::<[u64; 2]>::from_raw(self.totals[map].clone())
                .ok()
                .and_then(|a| a.get(i).ok())
                .unwrap_or_default()
        };
        for (i, kind) in ["default", "htod", "dtoh", "dtod", "peer", "htoh"].iter().enumerate() {
            let [n, bytes] = element(0, i as u32);
            if n > 0 {
                let _ = writeln!(text, "copies {kind} {n} {bytes}");
            }
        }
        let sets = (8..16).map(|i| element(0, i)).fold([0, 0], |a, e| [a[0] + e[0], a[1] + e[1]]);
        if sets[0] > 0 {
            let _ = writeln!(text, "sets {} {}", sets[0], sets[1]);
        }
        for (op, name) in [(0, "allocations"), (1, "frees")] {
            for (k, kind) in ["device", "pinned", "managed"].iter().enumerate() {
                let [n, bytes] = element(1, op * 4 + k as u32);
                if n > 0 {
                    let _ = writeln!(text, "{name} {kind} {n} {bytes}");
                }
            }
        }
        let freed = self.array(&self.freed, 0);
        if freed > 0 {
            let _ = writeln!(text, "freed {freed}");
        }
        for (k, kind) in ["stream", "event", "context", "device"].iter().enumerate() {
            let [n, _] = element(2, k as u32);
            if n > 0 {
                let _ = writeln!(text, "syncs {kind} {n}");
            }
        }
        for (k, kind) in ["other", "ptx"].iter().enumerate() {
            let [n, bytes] = element(3, k as u32);
            if n > 0 {
                let _ = writeln!(text, "modules {kind} {n} {bytes}");
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
}

impl Builtin {
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

    /// What `maps` hold, a line per entry: `map NAME KEY VALUE`, keys that are known kernel ids
    /// by the kernel's name, per-CPU values summed; maps of other shapes by their kind only.
    pub fn render_maps(&self, maps: &[(String, RawMap)]) -> String {
        let mut text = String::new();
        let key = |k: u64| -> String {
            let name = self.name(k);
            if k != 0 && !name.starts_with('(') { name } else { k.to_string() }
        };
        for (name, raw) in maps {
            let g = *raw.geometry();
            let mut lines: Vec<(String, u64)> = Vec::new();
            let shown = match (g.kind, g.key_size, g.value_size) {
                (MapKind::Hash, 8, 8) => HashMap::<u64, u64>::from_raw(raw.clone())
                    .map(|m| lines.extend(m.iter().map(|(k, v)| (key(k), v))))
                    .is_ok(),
                (MapKind::PerCpuHash, 8, 8) => {
                    egpu_maps::PerCpuHashMap::<u64, u64>::from_raw(raw.clone())
                        .map(|m| {
                            lines.extend(
                                m.keys().into_iter().filter_map(|k| Some((key(k), m.sum(&k)?))),
                            )
                        })
                        .is_ok()
                }
                (MapKind::Array, 4, 8) => Array::<u64>::from_raw(raw.clone())
                    .map(|a| {
                        lines.extend((0..g.capacity).filter_map(|i| {
                            a.get(i).ok().filter(|&v| v != 0).map(|v| (i.to_string(), v))
                        }))
                    })
                    .is_ok(),
                (MapKind::PerCpuArray, 4, 8) => {
                    egpu_maps::PerCpuArray::<u64>::from_raw(raw.clone())
                        .map(|a| {
                            lines.extend((0..g.capacity).filter_map(|i| {
                                a.sum(i).ok().filter(|&v| v != 0).map(|v| (i.to_string(), v))
                            }))
                        })
                        .is_ok()
                }
                _ => false,
            };
            if !shown {
                let _ = writeln!(
                    text,
                    "map {name} {} ({} B keys, {} B values: not shown)",
                    g.kind.name(),
                    g.key_size,
                    g.value_size
                );
                continue;
            }
            lines.sort();
            for (k, v) in lines {
                let _ = writeln!(text, "map {name} {k} {v}");
            }
        }
        text
    }
}

/// Removes process `pid`'s shared objects (those that exist), its user maps' included.
pub fn unlink(pid: u32) {
    for map in MAPS {
        let _ = egpu_maps::unlink_shared(&shared_name(pid, map));
    }
    for name in user_objects(pid) {
        let _ = egpu_maps::unlink_shared(&name);
    }
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
    let dead: Vec<u32> = processes().into_iter().filter(|&p| !alive(p)).collect();
    for &pid in &dead {
        unlink(pid);
    }
    dead.len()
}

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

/// A Prometheus label value, escaped.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

impl Builtin {
    fn array(&self, map: &RawMap, i: u32) -> u64 {
        Array::<u64>::from_raw(map.clone()).ok().and_then(|a| a.get(i).ok()).unwrap_or(0)
    }

    fn total(&self, map: usize, i: u32) -> [u64; 2] {
        Array::<[u64; 2]>::from_raw(self.totals[map].clone())
            .ok()
            .and_then(|a| a.get(i).ok())
            .unwrap_or_default()
    }
}
