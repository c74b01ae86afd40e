//! The built-in probes, their maps, kernel names, and what a process leaves when it exits.
//!
//! Set up at the first interposed launch of a process (and again in a child made by `fork`,
//! which starts from zero): a probe at `host::launch::enter` counts launches per kernel id in a
//! hash map. With `EGPU_SUMMARY` set, the process writes `<EGPU_SUMMARY>.<pid>` when it exits:
//!
//! ```text
//! pid 1234
//! launches 10
//! kernel 0x5d0031609daebb92 8 kernA
//! kernel 0x91b33df350f2acee 2 kernB
//! probes runs=10 faults=0 rejected=0
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

/// The process's probes and maps.
struct Defaults {
    pid: u32,
    launches: RawMap,
    program: Program,
    /// `None` while turned off ([`set_enabled`]).
    probe: Option<ProbeId>,
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
        if let Some(old) = state.take().and_then(|d| d.probe) {
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
    let geometry = Geometry::new(MapKind::Hash, 8, 8, KERNELS, 1, 0).ok()?;
    let launches = RawMap::create(geometry, &Placement::Process).ok()?;
    let def = MapDef {
        name: "launches".into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 8,
        max_entries: KERNELS,
    };
    let attach = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
    let program = Program::new(assemble(COUNT_LAUNCHES).ok()?, vec![def], attach).ok()?;
    let probe = probes.attach(&program, std::slice::from_ref(&launches)).ok()?;
    Some(Defaults { pid, launches, program, probe: Some(probe) })
}

/// Turns the built-in probes on or off; whether they were on before, or `None` when they could
/// not be set up.
pub(crate) fn set_enabled(on: bool) -> Option<bool> {
    let probes = self::probes()?;
    let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let d = state.as_mut()?;
    let was = d.probe.is_some();
    match (was, on) {
        (true, false) => {
            if let Some(id) = d.probe.take() {
                probes.detach(id);
            }
        }
        (false, true) => {
            d.probe = probes.attach(&d.program, std::slice::from_ref(&d.launches)).ok();
        }
        _ => {}
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
    let name_of = |id: u64| {
        names
            .as_ref()
            .and_then(|n| n.values().find(|(i, _)| *i == id).map(|(_, name)| name.clone()))
            .unwrap_or_default()
    };
    let mut kernels: Vec<(u64, u64)> = counts.iter().collect();
    kernels.sort();
    let mut text = format!("pid {}\n", d.pid);
    text.push_str(&format!("launches {}\n", kernels.iter().map(|(_, n)| n).sum::<u64>()));
    for (id, n) in kernels {
        text.push_str(&format!("kernel {id:#018x} {n} {}\n", name_of(id)));
    }
    let h = egpu::host::global().health();
    text.push_str(&format!("probes runs={} faults={} rejected={}\n", h.runs, h.faults, h.rejected));
    let mut path = base;
    path.push(format!(".{}", d.pid));
    if let Ok(mut file) = std::fs::File::create(&path) {
        let _ = file.write_all(text.as_bytes());
    }
}
