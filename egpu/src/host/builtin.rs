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
//! | `launches` | hash, kernel id → count | launches per kernel (graph launches under `u64::MAX`) |
//! | `copies` | array of `[count, bytes]` | copies by `MemcpyCtx` kind (0–5), sets at 8 + kind |
//! | `allocations` | array of `[count, bytes]` | successful allocations (`kind`) and frees (4 + `kind`) |
//! | `syncs` | array of `[count, 0]` | synchronisations by `SyncCtx` kind |
//! | `modules` | array of `[count, bytes]` | successful module loads: 1 with PTX (its bytes), 0 other |
//! | `names` | hash, kernel id → name (128 bytes, NUL-padded) | kernel names, written by the library |

use std::fmt::Write as _;

use egpu_ebpf::{
    AsmError, AttachPoint, HostEvent, MapDef, MapKind, Phase, Program, ProgramError, assemble,
};
use egpu_maps::layout::Geometry;
use egpu_maps::{Array, HashMap, MapError, Placement, RawMap};

use super::Health;

/// Kernels the launch counts and the names hold at most.
pub const KERNELS: u32 = 4096;
/// Bytes of a kernel name in the names map (longer names are cut).
pub const NAME_BYTES: usize = 128;

/// Counts a launch per kernel id (`LaunchCtx::kernel_id`) in map 0: look up and add; when
/// missing, insert 1 (unless another thread just did: then look up again and add).
const COUNT_LAUNCHES: &str = "
    ldxdw %r6, [%r1+0]
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
    exit";

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
pub const MAPS: [&str; 6] = ["launches", "copies", "allocations", "syncs", "modules", "names"];

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
}

/// A process's built-in maps.
#[derive(Clone, Debug)]
pub struct Builtin {
    /// The process they belong to.
    pub pid: u32,
    launches: RawMap,
    /// In [`TOTALS`] order.
    totals: Vec<RawMap>,
    names: RawMap,
}

fn def(name: &str, kind: MapKind, key_size: u32, value_size: u32, max_entries: u32) -> MapDef {
    MapDef { name: name.into(), kind, key_size, value_size, max_entries }
}

fn maps() -> Vec<MapDef> {
    let mut maps = vec![def("launches", MapKind::Hash, 8, 8, KERNELS)];
    maps.extend(TOTALS.iter().map(|t| def(t.0, MapKind::Array, 4, 16, t.4)));
    maps.push(def("names", MapKind::Hash, 8, NAME_BYTES as u32, KERNELS));
    maps
}

impl Builtin {
    /// Creates process `pid`'s maps, in shared memory when `shared` (falling back to process
    /// memory when shared memory cannot be had), else in process memory.
    pub fn create(pid: u32, shared: bool) -> Result<Builtin, MapError> {
        let make = |d: &MapDef| -> Result<RawMap, MapError> {
            let g = Geometry::new(d.kind, d.key_size, d.value_size, d.max_entries, 1, 0)?;
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
        let launches = maps.remove(0);
        Builtin { pid, launches, totals: maps, names }
    }

    /// The built-in programs, each with the map it updates.
    pub fn programs(&self) -> Result<Vec<(Program, RawMap)>, BuiltinError> {
        let defs = maps();
        let mut programs = Vec::new();
        let attach = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
        let launches = Program::new(assemble(COUNT_LAUNCHES)?, vec![defs[0].clone()], attach)?;
        programs.push((launches, self.launches.clone()));
        for (i, (_, event, phase, text, _)) in TOTALS.iter().enumerate() {
            let text = format!("{text}{ADD_COUNT_AND_BYTES}");
            let attach = AttachPoint::Host(*event, *phase);
            let program = Program::new(assemble(&text)?, vec![defs[1 + i].clone()], attach)?;
            programs.push((program, self.totals[i].clone()));
        }
        Ok(programs)
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

    /// The name recorded for a kernel id: `(unnamed)` for 0, `(graph)` for graph launches.
    pub fn name(&self, id: u64) -> String {
        match id {
            0 => "(unnamed)".into(),
            u64::MAX => "(graph)".into(),
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

    /// What the maps hold, as lines (counts that are 0 left out); with `health`, a last line of
    /// the probes' runs, faults and refusals:
    ///
    /// ```text
    /// pid 711
    /// launches 17
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
        let _ = writeln!(text, "launches {}", kernels.iter().map(|(_, n)| n).sum::<u64>());
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

/// Removes process `pid`'s shared objects (those that exist).
pub fn unlink(pid: u32) {
    for map in MAPS {
        let _ = egpu_maps::unlink_shared(&shared_name(pid, map));
    }
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
