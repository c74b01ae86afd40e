//! The built-in probes (`egpu::host::builtin`) in this process, kernel names, and what a process
//! leaves when it exits.
//!
//! Set up at the first interposed call of a process (and again in a child made by `fork`, which
//! starts from zero): the built-in maps are created in shared memory as `egpu-<pid>-<map>`
//! (unless `EGPU_SHARED=0`), where `egpu maps PID` reads them while the process runs, and the
//! objects of processes that died without removing theirs are removed. When the process exits it
//! writes its report to `<EGPU_SUMMARY>.<pid>` when `EGPU_SUMMARY` is set, and removes its
//! objects.

use std::collections::HashMap as StdHashMap;
use std::ffi::{CStr, c_char};
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use egpu::ebpf::verifier::Verified;
use egpu::host::builtin::{self, Builtin};
use egpu::host::{HostProbes, ProbeId};
use egpu::maps::RawMap;

use crate::device::UserProbes;
use crate::{Handle, real};

/// The process's probes and maps.
struct Defaults {
    pid: u32,
    builtin: Builtin,
    /// Their attachments.
    attached: Vec<ProbeId>,
    /// The user's probes (`EGPU_PROBES`), if any, and the attachments of their host probes.
    user: Option<Arc<UserProbes>>,
    user_attached: Vec<ProbeId>,
}

static STATE: Mutex<Option<Defaults>> = Mutex::new(None);
/// Set once the exit and fork handlers are registered.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// What every interposed call reads, on one cache line: after a driver call the caches are cold,
/// and each line read costs.
#[repr(C, align(64))]
pub(crate) struct Hot {
    /// [`READY`], [`FORKED`], [`PAUSED`] and [`SWAPPING`]: events are observed when it is
    /// `READY` alone (the trampolines' way) or has `READY` and not `PAUSED` (the whole way).
    gate: AtomicU8,
    /// Stream captures begun and not yet ended in this process (see `events::launch`).
    pub(crate) captures: AtomicI64,
    /// `egpu::host::global()`, once set up (stored before `READY`).
    probes: AtomicPtr<HostProbes>,
    /// What the contexts are given of where calls come from ([`crate::attribution`]):
    /// `attribution::SITES`, `attribution::TAGS`.
    pub(crate) attribution: AtomicU8,
}

/// [`Hot::gate`]: the probes are set up (in this process, or in the parent of a fork).
pub(crate) const READY: u8 = 1;
/// [`Hot::gate`]: a child made by `fork`, whose maps are copies of the parent's, to be replaced.
const FORKED: u8 = 2;
/// [`Hot::gate`]: the probes are paused ([`set_enabled`]): events go straight to the driver.
pub(crate) const PAUSED: u8 = 4;
/// [`Hot::gate`]: a launch's function may be swapped for another (a waiting library's kernel,
/// `device::libraries`): every call takes the whole way, which swaps.
const SWAPPING: u8 = 8;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
impl Hot {
    /// Where [`Hot::gate`] is, for the trampolines (`events::trampoline`).
    pub(crate) const GATE: usize = std::mem::offset_of!(Hot, gate);
}

pub(crate) static HOT: Hot = Hot {
    gate: AtomicU8::new(0),
    captures: AtomicI64::new(0),
    probes: AtomicPtr::new(std::ptr::null_mut()),
    attribution: AtomicU8::new(0),
};

thread_local! {
    /// The locks `before_fork` took, held across `fork` by the thread that forks.
    static FORK_GUARDS: std::cell::RefCell<Vec<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Before `fork`: takes this library's locks (before egpu's own, whose handlers were registered
/// first and so run after these), so that the child never inherits one that a thread it does
/// not have holds.
extern "C" fn before_fork() {
    let times = crate::kernel_times::fork_guard();
    let state: Box<dyn std::any::Any> = Box::new(STATE.lock().unwrap_or_else(|p| p.into_inner()));
    let names: Box<dyn std::any::Any> = Box::new(NAMES.write().unwrap_or_else(|p| p.into_inner()));
    let parts = crate::device::fork_guard();
    let devices = crate::events::devices::fork_guard();
    let functions = crate::events::functions::fork_guard();
    let guards = vec![times, state, names, parts, devices, functions];
    let _ = FORK_GUARDS.try_with(|g| *g.borrow_mut() = guards);
}

fn release_fork_guards() {
    if let Ok(mut guards) = FORK_GUARDS.try_with(|g| std::mem::take(&mut *g.borrow_mut())) {
        while let Some(guard) = guards.pop() {
            drop(guard);
        }
    }
}

extern "C" fn after_fork_parent() {
    release_fork_guards();
}

extern "C" fn forked_child() {
    HOT.gate.fetch_or(FORKED, Ordering::Relaxed);
    crate::forked_child();
    release_fork_guards();
}

extern "C" fn exiting() {
    // The device parts of the maps merged, after the GPU's work, before anything is reported.
    crate::device::finish();
    crate::kernel_times::finish();
    write_summary();
}

/// The process's probe set when events are to be observed: set up (on first use, and again
/// after a fork) and not paused; `None` when paused or when they could not be set up.
#[inline(always)]
pub(crate) fn active() -> Option<&'static HostProbes> {
    // The common cases, from one cache line and without a call.
    let gate = HOT.gate.load(Ordering::Acquire);
    if gate == READY {
        // SAFETY: null, or `egpu::host::global()`, which lives as long as the process.
        if let Some(probes) = unsafe { HOT.probes.load(Ordering::Relaxed).as_ref() } {
            return Some(probes);
        }
    } else if gate == READY | PAUSED {
        return None;
    }
    let probes = probes();
    if HOT.gate.load(Ordering::Relaxed) & PAUSED != 0 { None } else { probes }
}

/// The process's probe set, with the built-in probes attached (set up on first use, and again
/// after a fork), paused or not; `None` when they could not be set up.
#[cold]
#[inline(never)]
pub(crate) fn probes() -> Option<&'static HostProbes> {
    let gate = HOT.gate.load(Ordering::Acquire);
    if gate & (READY | FORKED) == READY {
        // SAFETY: as in `active`.
        if let Some(probes) = unsafe { HOT.probes.load(Ordering::Relaxed).as_ref() } {
            return Some(probes);
        }
    }
    let probes = egpu::host::global();
    HOT.probes.store(std::ptr::from_ref(probes).cast_mut(), Ordering::Relaxed);
    let pid = std::process::id();
    let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let forked = HOT.gate.fetch_and(!FORKED, Ordering::Relaxed) & FORKED != 0;
    if forked || state.as_ref().is_none_or(|d| d.pid != pid) {
        if let Some(old) = state.take() {
            for id in old.attached.iter().chain(&old.user_attached) {
                probes.detach(*id);
            }
            // The parent's maps: never dropped here, which would remove its shared objects.
            std::mem::forget(old);
        }
        *state = set_up(probes, pid);
    }
    if !REGISTERED.swap(true, Ordering::Relaxed) {
        // SAFETY: the handlers are `extern "C"` functions that live as long as the process.
        unsafe {
            libc::atexit(exiting);
            libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(forked_child));
        }
    }
    if state.is_some() {
        HOT.gate.fetch_or(READY, Ordering::Release);
    } else {
        HOT.gate.fetch_and(!READY, Ordering::Release);
    }
    state.is_some().then_some(probes)
}

fn set_up(probes: &HostProbes, pid: u32) -> Option<Defaults> {
    // Shared objects of processes that died without removing theirs.
    builtin::clean_dead();
    crate::attribution::configure();
    let shared = std::env::var_os("EGPU_SHARED").is_none_or(|v| v != "0");
    let builtin = Builtin::create(pid, shared).ok()?;
    // The devices used before (or, in a fork's child, in the parent).
    crate::events::devices::publish(&builtin);
    // A launch's device found from its function where the probes run (`events::functions`).
    probes.resolve_launch_devices(crate::events::functions::launch_device);
    probes.mirror_health(builtin.health_map().clone());
    let programs = builtin.programs().ok()?;
    let mut attached = attach_all(probes, &programs)?;
    if crate::kernel_times::enabled() {
        // The time spent in synchronisations, and every launch the whole way, to be timed.
        let timing = builtin.timing_programs().ok()?;
        attached.extend(attach_all(probes, &timing)?);
        swap_launches();
    }
    let user = UserProbes::set_up(pid, shared).map(Arc::new);
    let mut user_attached = Vec::new();
    for (program, maps) in user.iter().flat_map(|u| &u.host) {
        match probes.attach(program, maps) {
            Ok(id) => user_attached.push(id),
            Err(e) => eprintln!("egpu: EGPU_PROBES: a host probe was refused: {e}"),
        }
    }
    Some(Defaults { pid, builtin, attached, user, user_attached })
}

/// The user's probes in this process, when `EGPU_PROBES` named some.
pub(crate) fn user() -> Option<Arc<UserProbes>> {
    probes()?;
    let state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    state.as_ref()?.user.clone()
}

fn attach_all(probes: &HostProbes, programs: &[(Verified, Vec<RawMap>)]) -> Option<Vec<ProbeId>> {
    programs.iter().map(|(p, maps)| probes.attach(p, maps).ok()).collect()
}

/// Pauses the probes of this process (`on` false) or resumes them; whether they ran before, or
/// `None` when they could not be set up. They stay attached: pausing costs a flag, not a detach
/// and a new verification each time, so that a benchmark switching them between rounds measures
/// the steady state.
pub(crate) fn set_enabled(on: bool) -> Option<bool> {
    probes()?;
    let was = if on {
        HOT.gate.fetch_and(!PAUSED, Ordering::Relaxed)
    } else {
        HOT.gate.fetch_or(PAUSED, Ordering::Relaxed)
    };
    Some(was & PAUSED == 0)
}

/// From now on, every interposed call of the driver takes the whole way ([`SWAPPING`]), where
/// launches swap their function (`device::libraries::launched`) and are timed
/// (`kernel_times`).
pub(crate) fn swap_launches() {
    HOT.gate.fetch_or(SWAPPING, Ordering::Release);
}

/// `f` with the process's built-in maps, when they are set up; its answer.
pub(crate) fn with_builtin<T>(f: impl FnOnce(&Builtin) -> T) -> Option<T> {
    let state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let d = state.as_ref().filter(|d| d.pid == std::process::id())?;
    Some(f(&d.builtin))
}

/// Kernel names by `CUfunction`, resolved once each.
static NAMES: RwLock<Option<StdHashMap<usize, (u64, String)>>> = RwLock::new(None);

/// The id of the kernel `f` (the hash of its mangled name), resolved once per function: 0 when
/// the driver cannot name it.
pub(crate) fn kernel_id(f: Handle) -> u64 {
    let key = f as usize;
    let known = NAMES.read().ok().and_then(|n| n.as_ref().and_then(|n| n.get(&key).map(|e| e.0)));
    known.unwrap_or_else(|| {
        let (name, kernel) = named(f).unwrap_or_default();
        // Its device, for its launches', when the program found it in a way not seen.
        crate::events::functions::first_launch(f, kernel);
        let id = if name.is_empty() { 0 } else { egpu::ebpf::kernel_id(&name) };
        if id != 0
            && let Ok(state) = STATE.lock()
            && let Some(d) = state.as_ref()
        {
            d.builtin.record_name(id, &name);
        }
        if let Ok(mut names) = NAMES.write() {
            names.get_or_insert_with(StdHashMap::new).insert(key, (id, name));
        }
        crate::device::mem::remember_loaded(id, f);
        id
    })
}

/// Records `name` under its kernel id in the built-in name table: the kernels of a module
/// instrumented are named there even when they only run from graphs, which no launch names.
pub(crate) fn record_kernel_name(name: &str) {
    if let Ok(state) = STATE.lock()
        && let Some(d) = state.as_ref()
    {
        d.builtin.record_name(egpu::ebpf::kernel_id(name), name);
    }
}

/// The mangled name of `f`, from the driver's `cuFuncGetName`, or `cuKernelGetName` when `f` is
/// a `CUkernel` (what the CUDA runtime launches), both CUDA 12.3.
pub(crate) fn function_name(f: Handle) -> Option<String> {
    named(f).map(|(name, _)| name)
}

/// [`function_name`], and whether the driver named `f` as a `CUkernel`.
fn named(f: Handle) -> Option<(String, bool)> {
    [&real::FUNC_GET_NAME, &real::KERNEL_GET_NAME].into_iter().zip([false, true]).find_map(
        |(hook, kernel)| {
            let get = hook.get_or_ask()?;
            let mut name: *const c_char = std::ptr::null();
            // SAFETY: the driver's function, with a pointer to write to and the caller's handle.
            let result = unsafe { get(&mut name, f) };
            if result != 0 || name.is_null() {
                return None;
            }
            // SAFETY: the driver returns a C string that lives as long as the function.
            Some((unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned(), kernel))
        },
    )
}

/// At exit: writes what this process counted to `<EGPU_SUMMARY>.<pid>` when `EGPU_SUMMARY` is
/// set, then removes its shared objects (or, under `egpu run`, leaves them for it).
fn write_summary() {
    // The events still queued for the worker thread count too.
    egpu::host::global().flush();
    let state = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(d) = state.as_ref().filter(|d| d.pid == std::process::id()) else { return };
    if let Some(base) = std::env::var_os("EGPU_SUMMARY") {
        let mut text = d.builtin.report(Some(egpu::host::global().health()));
        if let Some(user) = &d.user {
            text.push_str(&crate::device::summary(user, &d.builtin));
        }
        text.push_str(&crate::attribution::sites::summary());
        text.push_str(&crate::attribution::spans::summary());
        text.push_str(&crate::nccl::summary());
        let mut path = base;
        path.push(format!(".{}", d.pid));
        if let Ok(mut file) = std::fs::File::create(&path) {
            let _ = file.write_all(text.as_bytes());
        }
    }
    if let Some(user) = &d.user {
        crate::device::mem::write(user, &d.builtin);
    }
    crate::attribution::gpu_time::write();
    // Under `egpu run`, left for it to read and remove (`egpu::host::builtin::kept`).
    let kept = builtin::kept::keeper().is_some_and(|by| builtin::kept::keep(d.pid, by));
    if !kept {
        builtin::unlink(d.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use egpu::ebpf::{HostEvent, Phase};

    #[test]
    fn every_built_in_probe_is_accepted() {
        let probes = HostProbes::new();
        // As `set_up` has it: a launch's device found where the probes run.
        probes.resolve_launch_devices(crate::events::functions::launch_device);
        let builtin = Builtin::create(std::process::id(), false).expect("the maps");
        let programs = builtin.programs().expect("the programs");
        let attached = attach_all(&probes, &programs).expect("every program attaches");
        assert_eq!(attached.len(), 8);
        for (event, phase) in [
            (HostEvent::Launch, Phase::Enter),
            (HostEvent::Memcpy, Phase::Enter),
            (HostEvent::Alloc, Phase::Exit),
            (HostEvent::Sync, Phase::Enter),
            (HostEvent::ModuleLoad, Phase::Exit),
        ] {
            assert!(probes.armed(event, phase), "{event:?} {phase:?}");
        }
        // The launch probes read the kernel id, the flags, the grid, the block and the device,
        // which the worker finds from the function: the caller fills the kernel id, the
        // function, the flags, the grid and the block, no clock (word 3), no thread id or device
        // (word 8), in one queue slot (64 bytes).
        let words = probes.context_words(HostEvent::Launch, Phase::Enter);
        assert_eq!(words, 0b1111_0011, "{words:#b}");
        assert_eq!(probes.context_needed(HostEvent::Launch, Phase::Enter), 64);
        assert!(probes.launch_device_found_by_probes(Phase::Enter));
    }
}
