//! The built-in probes, their maps, kernel names, and what a process leaves when it exits.
//!
//! Set up at the first interposed call of a process (and again in a child made by `fork`, which
//! starts from zero): a probe at `host::launch::enter` counts launches per kernel id in a hash
//! map (graph launches under id `u64::MAX`); others count copies and sets by direction,
//! allocations and frees by kind (with bytes), synchronisations by kind and module loads (PTX or
//! not). With `EGPU_SUMMARY` set, the process writes `<EGPU_SUMMARY>.<pid>` when it exits (lines
//! for counts that are 0 left out):
//!
//! ```text
//! pid 1234
//! launches 10
//! kernel 0x5d0031609daebb92 8 kernA
//! kernel 0x91b33df350f2acee 2 kernB
//! copies htod 2 8192
//! sets 1 4096
//! allocations device 1 4096
//! frees device 1 0
//! syncs context 1
//! modules ptx 1 2011
//! probes runs=19 faults=0 rejected=0
//! ```

use std::collections::HashMap as StdHashMap;
use std::ffi::{CStr, c_char};
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};

use egpu::ebpf::{AttachPoint, HostEvent, MapDef, MapKind, Phase, Program, assemble};
use egpu::host::{HostProbes, ProbeId};
use egpu::maps::layout::Geometry;
use egpu::maps::{Placement, RawMap};

use crate::{Handle, real};

/// Kernels a process's launch counts hold at most.
const KERNELS: u32 = 4096;

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

/// The built-in probes other than the launch count: a name, its event and phase, the program
/// (ahead of [`ADD_COUNT_AND_BYTES`]) and the elements of its `[count, bytes]` array.
const TOTALS: [(&str, HostEvent, Phase, &str, u32); 4] = [
    ("copies", HostEvent::Memcpy, Phase::Enter, COUNT_COPIES, 16),
    ("allocations", HostEvent::Alloc, Phase::Exit, COUNT_ALLOCS, 8),
    ("syncs", HostEvent::Sync, Phase::Enter, COUNT_SYNCS, 4),
    ("modules", HostEvent::ModuleLoad, Phase::Exit, COUNT_MODULES, 2),
];

/// The process's probes and maps.
struct Defaults {
    pid: u32,
    launches: RawMap,
    /// The `[count, bytes]` arrays of [`TOTALS`], in its order.
    totals: Vec<RawMap>,
    /// Every built-in program with its map.
    programs: Vec<(Program, RawMap)>,
    /// Their attachments; empty while turned off ([`set_enabled`]).
    attached: Vec<ProbeId>,
}

static STATE: Mutex<Option<Defaults>> = Mutex::new(None);
/// Set in a child made by `fork`: its maps are copies of the parent's, to be replaced.
static FORKED: AtomicBool = AtomicBool::new(false);
/// Set once the exit and fork handlers are registered.
static REGISTERED: AtomicBool = AtomicBool::new(false);
/// Set once the probes are set up (in this process, or in the parent of a fork).
static READY: AtomicBool = AtomicBool::new(false);

extern "C" fn forked_child() {
    // Only a store: a fork's child may run nothing else that is not async-signal-safe.
    FORKED.store(true, Ordering::Relaxed);
}

extern "C" fn exiting() {
    write_summary();
}

/// The process's probe set, with the built-in probes attached (set up on first use, and again
/// after a fork); `None` when they could not be set up.
pub(crate) fn probes() -> Option<&'static HostProbes> {
    let probes = egpu::host::global();
    // The common case, without a lock or a system call: set up, and no fork since.
    if READY.load(Ordering::Acquire) && !FORKED.load(Ordering::Relaxed) {
        return Some(probes);
    }
    let pid = std::process::id();
    let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let forked = FORKED.swap(false, Ordering::Relaxed);
    if forked || state.as_ref().is_none_or(|d| d.pid != pid) {
        for old in state.take().map(|d| d.attached).unwrap_or_default() {
            probes.detach(old);
        }
        *state = set_up(probes, pid);
    }
    if !REGISTERED.swap(true, Ordering::Relaxed) {
        // SAFETY: both handlers are `extern "C"` functions that live as long as the process.
        unsafe {
            libc::atexit(exiting);
            libc::pthread_atfork(None, None, Some(forked_child));
        }
    }
    READY.store(state.is_some(), Ordering::Release);
    state.is_some().then_some(probes)
}

fn set_up(probes: &HostProbes, pid: u32) -> Option<Defaults> {
    let map = |kind, key_size, value_size, max_entries| -> Option<(MapDef, RawMap)> {
        let geometry = Geometry::new(kind, key_size, value_size, max_entries, 1, 0).ok()?;
        let raw = RawMap::create(geometry, &Placement::Process).ok()?;
        let def = MapDef { name: "counts".into(), kind, key_size, value_size, max_entries };
        Some((def, raw))
    };
    let program = |text: &str, def: MapDef, event, phase| {
        Program::new(assemble(text).ok()?, vec![def], AttachPoint::Host(event, phase)).ok()
    };
    let (def, launches) = map(MapKind::Hash, 8, 8, KERNELS)?;
    let mut programs =
        vec![(program(COUNT_LAUNCHES, def, HostEvent::Launch, Phase::Enter)?, launches.clone())];
    let mut totals = Vec::new();
    for (_, event, phase, text, elements) in TOTALS {
        let (def, raw) = map(MapKind::Array, 4, 16, elements)?;
        let text = format!("{text}{ADD_COUNT_AND_BYTES}");
        programs.push((program(&text, def, event, phase)?, raw.clone()));
        totals.push(raw);
    }
    let attached = attach_all(probes, &programs)?;
    Some(Defaults { pid, launches, totals, programs, attached })
}

fn attach_all(probes: &HostProbes, programs: &[(Program, RawMap)]) -> Option<Vec<ProbeId>> {
    programs.iter().map(|(p, m)| probes.attach(p, std::slice::from_ref(m)).ok()).collect()
}

/// Turns the built-in probes on or off; whether they were on before, or `None` when they could
/// not be set up.
pub(crate) fn set_enabled(on: bool) -> Option<bool> {
    let probes = self::probes()?;
    let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let d = state.as_mut()?;
    let was = !d.attached.is_empty();
    if was && !on {
        for id in d.attached.drain(..) {
            probes.detach(id);
        }
    } else if on && !was {
        d.attached = attach_all(probes, &d.programs).unwrap_or_default();
    }
    Some(was)
}

/// Kernel names by `CUfunction`, resolved once each.
static NAMES: RwLock<Option<StdHashMap<usize, (u64, String)>>> = RwLock::new(None);

/// The id of the kernel `f` (the hash of its mangled name), resolved once per function: 0 when
/// the driver cannot name it.
pub(crate) fn kernel_id(f: Handle) -> u64 {
    let key = f as usize;
    let known = NAMES.read().ok().and_then(|n| n.as_ref().and_then(|n| n.get(&key).map(|e| e.0)));
    known.unwrap_or_else(|| {
        let name = function_name(f).unwrap_or_default();
        let id = if name.is_empty() { 0 } else { egpu::ebpf::kernel_id(&name) };
        if let Ok(mut names) = NAMES.write() {
            names.get_or_insert_with(StdHashMap::new).insert(key, (id, name));
        }
        id
    })
}

/// The mangled name of `f`, from the driver's `cuFuncGetName`, or `cuKernelGetName` when `f` is
/// a `CUkernel` (what the CUDA runtime launches), both CUDA 12.3.
fn function_name(f: Handle) -> Option<String> {
    [&real::FUNC_GET_NAME, &real::KERNEL_GET_NAME].into_iter().find_map(|hook| {
        let get = hook.get_or_ask()?;
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: the driver's function, with a pointer to write to and the caller's handle.
        let result = unsafe { get(&mut name, f) };
        if result != 0 || name.is_null() {
            return None;
        }
        // SAFETY: the driver returns a C string that lives as long as the function.
        Some(unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned())
    })
}

/// Writes what this process counted to `<EGPU_SUMMARY>.<pid>`, when `EGPU_SUMMARY` is set.
fn write_summary() {
    let Some(base) = std::env::var_os("EGPU_SUMMARY") else { return };
    // The events still queued for the worker thread count too.
    egpu::host::global().flush();
    let state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(d) = state.as_ref().filter(|d| d.pid == std::process::id()) else { return };
    let Ok(counts) = egpu::maps::HashMap::<u64, u64>::from_raw(d.launches.clone()) else { return };
    let names = NAMES.read().unwrap_or_else(|p| p.into_inner());
    let name_of = |id: u64| match id {
        0 => "(unnamed)".to_string(),
        u64::MAX => "(graph)".to_string(),
        _ => names
            .as_ref()
            .and_then(|n| n.values().find(|(i, _)| *i == id).map(|(_, name)| name.clone()))
            .unwrap_or_default(),
    };
    let mut kernels: Vec<(u64, u64)> = counts.iter().collect();
    kernels.sort();
    let mut text = format!("pid {}\n", d.pid);
    text.push_str(&format!("launches {}\n", kernels.iter().map(|(_, n)| n).sum::<u64>()));
    for (id, n) in kernels {
        text.push_str(&format!("kernel {id:#018x} {n} {}\n", name_of(id)));
    }
    // The arrays of TOTALS, element by element, named.
    let element = |map: usize, i: u32| -> [u64; 2] {
        d.totals
            .get(map)
            .and_then(|raw| egpu::maps::Array::<[u64; 2]>::from_raw(raw.clone()).ok())
            .and_then(|a| a.get(i).ok())
            .unwrap_or_default()
    };
    const COPY_KINDS: [&str; 6] = ["default", "htod", "dtoh", "dtod", "peer", "htoh"];
    for (i, kind) in COPY_KINDS.iter().enumerate() {
        let [n, bytes] = element(0, i as u32);
        if n > 0 {
            text.push_str(&format!("copies {kind} {n} {bytes}\n"));
        }
    }
    let sets = (8..16).map(|i| element(0, i)).fold([0, 0], |a, e| [a[0] + e[0], a[1] + e[1]]);
    if sets[0] > 0 {
        text.push_str(&format!("sets {} {}\n", sets[0], sets[1]));
    }
    for (op, name) in [(0, "allocations"), (1, "frees")] {
        for (k, kind) in ["device", "pinned", "managed"].iter().enumerate() {
            let [n, bytes] = element(1, op * 4 + k as u32);
            if n > 0 {
                text.push_str(&format!("{name} {kind} {n} {bytes}\n"));
            }
        }
    }
    for (k, kind) in ["stream", "event", "context", "device"].iter().enumerate() {
        let [n, _] = element(2, k as u32);
        if n > 0 {
            text.push_str(&format!("syncs {kind} {n}\n"));
        }
    }
    for (k, kind) in ["other", "ptx"].iter().enumerate() {
        let [n, bytes] = element(3, k as u32);
        if n > 0 {
            text.push_str(&format!("modules {kind} {n} {bytes}\n"));
        }
    }
    let h = egpu::host::global().health();
    text.push_str(&format!("probes runs={} faults={} rejected={}\n", h.runs, h.faults, h.rejected));
    let mut path = base;
    path.push(format!(".{}", d.pid));
    if let Ok(mut file) = std::fs::File::create(&path) {
        let _ = file.write_all(text.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_probe_is_accepted() {
        let probes = HostProbes::new();
        let d = set_up(&probes, 1).unwrap_or_else(|| {
            // Say which one is refused.
            for (name, event, phase, text, elements) in TOTALS {
                let def = MapDef {
                    name: "counts".into(),
                    kind: MapKind::Array,
                    key_size: 4,
                    value_size: 16,
                    max_entries: elements,
                };
                let text = format!("{text}{ADD_COUNT_AND_BYTES}");
                let program = Program::new(
                    assemble(&text).expect("assembles"),
                    vec![def],
                    AttachPoint::Host(event, phase),
                )
                .expect("a program");
                let e = egpu::ebpf::verifier::verify(&program).err();
                assert!(e.is_none(), "{name}: {e:?}");
            }
            panic!("set_up failed")
        });
        assert_eq!(d.attached.len(), 1 + TOTALS.len());
        assert!(probes.armed(HostEvent::Memcpy, Phase::Enter));
        assert!(probes.armed(HostEvent::Alloc, Phase::Exit));
        assert!(probes.armed(HostEvent::Sync, Phase::Enter));
        assert!(probes.armed(HostEvent::ModuleLoad, Phase::Exit));
        // A launch count reads the kernel id only: no clock, no thread id.
        assert_eq!(probes.context_needed(HostEvent::Launch, Phase::Enter), 8);
    }
}
