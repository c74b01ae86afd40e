//! Host attach points: probes that run, in the CPU VM, when a program calls the CUDA API.
//!
//! A [`HostProbes`] set holds programs attached to host events ([`HostEvent`]: launches, copies,
//! allocations, synchronisation, module loads), before or after the call ([`Phase`]). Whoever
//! sees the call (egpu's own launch path, or the preloaded library that interposes the CUDA API
//! of an unmodified program) fills the event's context and calls [`HostProbes::fire`], which runs
//! every program attached to that event and phase on the calling thread.
//!
//! - **Cheap when idle.** [`HostProbes::armed`] is one relaxed load; `fire` returns at once when
//!   nothing is attached to the event and phase.
//! - **Now or shortly.** [`HostProbes::fire`] runs the probes on the calling thread, now;
//!   [`HostProbes::post`] queues the event for the set's worker thread, which costs the caller
//!   far less when the call it observes leaves the caches cold (see `host/deferred.rs`).
//! - **One VM per thread.** rbpf's VMs are neither `Send` nor `Sync`, so each thread loads its
//!   own VM of every attached program the first time it fires after an attach or detach (the JIT
//!   compiles then), and keeps it. Maps are shared: every thread's VM binds the same
//!   [`RawMap`]s, whose updates are atomic.
//! - **Never in the way.** A probe is verified when it is attached, so it cannot crash the
//!   program; a run that fails anyway (a fault the interpreter catches) is counted in
//!   [`Health::faults`], and the call goes on. `fire` never panics and never blocks on
//!   another thread's probes.
//!
//! Probe packs ([`pack`]) carry probes out of the program that built them into the preloaded
//! library, which runs their host probes here.
#![deny(missing_docs)]

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use bytemuck::Pod;
use egpu_ebpf::verifier::Verified;
use egpu_ebpf::{
    AllocCtx, AttachPoint, HostEvent, LaunchCtx, MemcpyCtx, ModuleLoadCtx, Phase, SyncCtx,
};
use egpu_maps::RawMap;

use egpu_vm::{EngineChoice, LoadError, Vm};

/// The context of a host event: which event it belongs to.
pub trait HostContext: Pod {
    /// The event whose context this is.
    const EVENT: HostEvent;
}

impl HostContext for LaunchCtx {
    const EVENT: HostEvent = HostEvent::Launch;
}
impl HostContext for MemcpyCtx {
    const EVENT: HostEvent = HostEvent::Memcpy;
}
impl HostContext for AllocCtx {
    const EVENT: HostEvent = HostEvent::Alloc;
}
impl HostContext for SyncCtx {
    const EVENT: HostEvent = HostEvent::Sync;
}
impl HostContext for ModuleLoadCtx {
    const EVENT: HostEvent = HostEvent::ModuleLoad;
}

/// Names an attached probe, for [`HostProbes::detach`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProbeId(u64);

/// Why a probe could not be attached.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachError {
    /// The program's attach point is not a host event.
    #[error("{0} is not a host attach point")]
    NotHost(AttachPoint),
    /// The program does not load on the CPU VM: a helper it lacks, or maps that do not fit.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// What the probes of a set have done, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Probe runs that completed.
    pub runs: u64,
    /// Probe runs that failed (the interpreter caught a fault); the call went on.
    pub faults: u64,
    /// Programs refused at attach (not a host event, a helper the CPU lacks, maps).
    pub rejected: u64,
    /// Fires skipped because the thread was already running this set's probes (a probe cannot
    /// call the CUDA API, so only a signal handler that does could cause one).
    pub reentered: u64,
}

/// One attached program.
struct Attached {
    id: ProbeId,
    event: HostEvent,
    phase: Phase,
    verified: Arc<Verified>,
    maps: Arc<[RawMap]>,
    /// Context bytes it may access.
    needed: usize,
    /// The 8-byte words of the context it may read or write (bit `i`: bytes `8i..8i + 8`).
    words: u16,
    /// It calls `egpu_delay_ns`: it waits, on the thread of the event it observes.
    waits: bool,
}

/// Programs attached to host events (see the module documentation).
pub struct HostProbes {
    /// Tells this set's VMs from another's in a thread's cache.
    serial: u64,
    attached: RwLock<Vec<Attached>>,
    /// Bumped by every attach and detach: a thread reloads its VMs when it changed.
    generation: AtomicU64,
    /// What a caller reads on every event.
    hot: Hot,
    next_id: AtomicU64,
    /// Completed runs, one counter per thread that fired (each written by its thread alone,
    /// without a locked instruction), summed when asked.
    runs: Mutex<Vec<Arc<AtomicU64>>>,
    faults: AtomicU64,
    rejected: AtomicU64,
    reentered: AtomicU64,
    /// Queues of posted events ([`HostProbes::post`]).
    registry: deferred::Registry,
    /// An array of `u64` the worker thread copies [`Health`] into ([`HostProbes::mirror_health`]).
    /// (Every lock here is also taken across `fork` by `deferred::before_fork`.)
    health_mirror: Mutex<Option<RawMap>>,
    /// Where the probes that run a launch's events find its device ([`LaunchDevices`]).
    launch_devices: LaunchDevices,
}

/// A launch's `device` found where its probes run, from its function (see
/// [`HostProbes::resolve_launch_devices`]): the resolver, whether the callers fill the device
/// instead, and per phase whether the probes' runs fill it now (bit 0 enter, bit 1 exit).
#[derive(Default)]
struct LaunchDevices {
    resolver: OnceLock<fn(u64) -> u32>,
    by_callers: AtomicBool,
    filled: AtomicU32,
}

/// Where `LaunchCtx::device` ends: a launch probe that reads no further, with the device filled
/// where it runs, needs only the first line of the context from its caller.
const LAUNCH_DEVICE_END: usize = std::mem::offset_of!(LaunchCtx, device) + 4;
/// The context word that holds `LaunchCtx::device` (bit `i`: bytes `8i..8i + 8`).
const LAUNCH_DEVICE_WORD: u16 = 1 << (std::mem::offset_of!(LaunchCtx, device) / 8);
/// The context word that holds `LaunchCtx::function`, what the device is found from.
const LAUNCH_FUNCTION_WORD: u16 = 1 << (std::mem::offset_of!(LaunchCtx, function) / 8);
/// Where `LaunchCtx::function` ends.
const LAUNCH_FUNCTION_END: usize = std::mem::offset_of!(LaunchCtx, function) + 8;

impl std::fmt::Debug for HostProbes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostProbes")
            .field("attached", &self.attached.read().map(|a| a.len()).unwrap_or(0))
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}

fn slot(event: HostEvent, phase: Phase) -> usize {
    let e = match event {
        HostEvent::Launch => 0,
        HostEvent::Memcpy => 1,
        HostEvent::Alloc => 2,
        HostEvent::Sync => 3,
        HostEvent::ModuleLoad => 4,
    };
    e * 2 + usize::from(phase == Phase::Exit)
}

/// A thread's VMs of one set, as of one generation.
struct ThreadVms {
    serial: u64,
    generation: u64,
    vms: Vec<(HostEvent, Phase, Vm)>,
    /// This thread's completed runs (registered in the set's `runs`).
    runs: Arc<AtomicU64>,
}

thread_local! {
    static VMS: RefCell<Vec<ThreadVms>> = const { RefCell::new(Vec::new()) };
}

static SERIAL: AtomicU64 = AtomicU64::new(0);

/// What a caller reads on every event, on one cache line (the launch's and the copy's words
/// included): after a driver call the caches are cold, and each line costs.
#[repr(C, align(64))]
#[derive(Default)]
struct Hot {
    /// Forks this set has seen in this process's line of descent (bumped in the child by
    /// `deferred`'s fork handler): a [`Poster`] made before a fork must not post.
    forks: AtomicU32,
    /// Per event and phase (`slot(event, phase)`), in one word: whether one of them waits
    /// (bit 63, see [`HostProbes::waits`]), the probes attached (bits 32–62), the context bytes
    /// they read at most (bits 16–31) and the context words they touch (bits 0–15, see
    /// [`HostProbes::context_words`]).
    state: [AtomicU64; 10],
}

impl Default for HostProbes {
    fn default() -> Self {
        HostProbes::new()
    }
}

impl HostProbes {
    /// An empty set.
    pub fn new() -> HostProbes {
        HostProbes {
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
            attached: RwLock::new(Vec::new()),
            generation: AtomicU64::new(0),
            hot: Hot::default(),
            next_id: AtomicU64::new(0),
            runs: Mutex::new(Vec::new()),
            faults: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            reentered: AtomicU64::new(0),
            registry: deferred::Registry::new(),
            health_mirror: Mutex::new(None),
            launch_devices: LaunchDevices::default(),
        }
    }

    /// Attaches a verified program to the host event and phase its attach point names, with
    /// entry `n` of its map table bound to `maps[n]`. It is loaded once here, so a program that
    /// cannot run on the CPU is refused now, not when the event comes; every thread that fires it
    /// later loads its own VM from the same [`Verified`], without verifying it again.
    pub fn attach(&self, verified: &Verified, maps: &[RawMap]) -> Result<ProbeId, AttachError> {
        let program = verified.program();
        let refuse = |e: AttachError| {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            Err(e)
        };
        let AttachPoint::Host(event, phase) = program.attach_point() else {
            return refuse(AttachError::NotHost(program.attach_point()));
        };
        let needed = match Vm::with_maps(verified, maps, EngineChoice::Auto) {
            Ok(vm) => vm.context_needed(),
            Err(e) => return refuse(e.into()),
        };
        let words = context_words(verified);
        let waits = calls_delay(verified);
        let id = ProbeId(self.next_id.fetch_add(1, Ordering::Relaxed));
        let mut attached = self.attached.write().unwrap_or_else(|p| p.into_inner());
        attached.push(Attached {
            id,
            event,
            phase,
            verified: Arc::new(verified.clone()),
            maps: maps.into(),
            needed,
            words,
            waits,
        });
        self.account(&attached, event, phase);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(id)
    }

    /// Recounts what the probes of `event` and `phase` are and need.
    fn account(&self, attached: &[Attached], event: HostEvent, phase: Phase) {
        let mine = || attached.iter().filter(|a| a.event == event && a.phase == phase);
        let mut needed = mine().map(|a| a.needed).max().unwrap_or(0);
        let mut words = mine().fold(0, |w, a| w | a.words);
        // A launch's device, found where the probes run: the callers fill the context's first
        // line only (and its function), when no probe reads past the device.
        if event == HostEvent::Launch {
            let bit = 1 << u32::from(phase == Phase::Exit);
            let d = &self.launch_devices;
            let found_here = d.resolver.get().is_some()
                && !d.by_callers.load(Ordering::Acquire)
                && words & LAUNCH_DEVICE_WORD != 0
                && needed <= LAUNCH_DEVICE_END;
            if found_here {
                needed = needed.min(LAUNCH_DEVICE_END - 4);
                words = words & !LAUNCH_DEVICE_WORD | LAUNCH_FUNCTION_WORD;
                d.filled.fetch_or(bit, Ordering::AcqRel);
            } else {
                d.filled.fetch_and(!bit, Ordering::AcqRel);
            }
        }
        let count = u64::try_from(mine().count()).unwrap_or(u64::MAX).min(0x7fff_ffff);
        let needed = u64::try_from(needed).unwrap_or(u64::MAX).min(0xffff);
        let waits = u64::from(mine().any(|a| a.waits));
        let state = waits << 63 | count << 32 | needed << 16 | u64::from(words);
        self.hot.state[slot(event, phase)].store(state, Ordering::Relaxed);
    }

    /// Has the probes find a launch's `device` where they run, from its function handle
    /// (`LaunchCtx::function`), through `resolver`, rather than have the caller fill it: the
    /// device lies past the context's first 64 bytes, which is all a launch probe that reads
    /// nothing further needs the caller to queue ([`Poster::post_line`]). So the launch probes
    /// that read at most up to the device cost the caller what they cost without it; their
    /// runs ([`fire`](Self::fire), the worker's) write `resolver(function)` into the device,
    /// whatever the caller gave. (The preloaded library's resolver: a table of the functions
    /// the program found, each in one context, so on one device.) A set's first resolver stays.
    pub fn resolve_launch_devices(&self, resolver: fn(u64) -> u32) {
        let _ = self.launch_devices.resolver.set(resolver);
        self.account_launches();
    }

    /// From now on the callers fill a launch's `device` as they fill other fields (the probes
    /// that read it make the caller queue the context up to it): for a process where a
    /// function's handle does not say its device (a `CUkernel` launched in contexts of
    /// several devices). Launches queued before still get theirs from the resolver.
    pub fn launch_devices_from_callers(&self) {
        self.launch_devices.by_callers.store(true, Ordering::Release);
        self.account_launches();
    }

    /// Whether the launch probes' runs at `phase` write the launch's device from its function
    /// ([`resolve_launch_devices`](Self::resolve_launch_devices)), so that callers need not.
    pub fn launch_device_found_by_probes(&self, phase: Phase) -> bool {
        let bit = 1 << u32::from(phase == Phase::Exit);
        self.launch_devices.filled.load(Ordering::Acquire) & bit != 0
    }

    fn account_launches(&self) {
        let attached = self.attached.write().unwrap_or_else(|p| p.into_inner());
        for phase in [Phase::Enter, Phase::Exit] {
            self.account(&attached, HostEvent::Launch, phase);
        }
    }

    /// The launch's device from its function, written into `ctx` (a launch's context, as much
    /// of it as the caller gave) when the probes at `phase` find it here; a context shorter than
    /// the device is copied into `buf` (as long as the context) and given the device there.
    fn found_device<'c>(&self, phase: Phase, ctx: &'c mut [u8], buf: &'c mut [u8]) -> &'c mut [u8] {
        let Some(resolver) = self.launch_devices.resolver.get() else { return ctx };
        if !self.launch_device_found_by_probes(phase) || ctx.len() < LAUNCH_FUNCTION_END {
            return ctx;
        }
        let at = std::mem::offset_of!(LaunchCtx, function);
        let function =
            u64::from_le_bytes(ctx[at..LAUNCH_FUNCTION_END].try_into().unwrap_or([0; 8]));
        let device = resolver(function).to_le_bytes();
        let ctx = if ctx.len() >= LAUNCH_DEVICE_END {
            ctx
        } else {
            let len = ctx.len();
            buf[..len].copy_from_slice(ctx);
            &mut buf[..LAUNCH_DEVICE_END]
        };
        ctx[LAUNCH_DEVICE_END - 4..LAUNCH_DEVICE_END].copy_from_slice(&device);
        ctx
    }

    /// Detaches a probe: calls that begin after this returns do not run it. False when it was not
    /// attached.
    pub fn detach(&self, id: ProbeId) -> bool {
        let mut attached = self.attached.write().unwrap_or_else(|p| p.into_inner());
        let Some(at) = attached.iter().position(|a| a.id == id) else { return false };
        let gone = attached.remove(at);
        self.account(&attached, gone.event, gone.phase);
        self.generation.fetch_add(1, Ordering::Release);
        true
    }

    /// Whether any probe is attached to `event` at `phase`: what a caller checks before it
    /// spends time filling a context.
    #[inline]
    pub fn armed(&self, event: HostEvent, phase: Phase) -> bool {
        self.state(event, phase) >> 32 != 0
    }

    /// The hot word of `event` at `phase` (see [`Hot::state`]), read once by a caller that
    /// needs several of its fields.
    #[inline]
    fn state(&self, event: HostEvent, phase: Phase) -> u64 {
        self.hot.state[slot(event, phase)].load(Ordering::Relaxed)
    }

    /// Whether a probe attached to `event` at `phase` waits (calls `egpu_delay_ns`): then the
    /// event is not posted ([`post`](Self::post)) but its probes run on the calling thread, now,
    /// so that the call they observe waits with them (a slower memory tier slows a copy too).
    #[inline]
    pub fn waits(&self, event: HostEvent, phase: Phase) -> bool {
        self.state(event, phase) >> 63 != 0
    }

    /// How many bytes at the start of `event`'s context the probes attached at `phase` may read
    /// or write, at most (0 when none is attached): a caller need not fill the fields past them
    /// (a timestamp costs a clock read).
    #[inline]
    pub fn context_needed(&self, event: HostEvent, phase: Phase) -> usize {
        (self.state(event, phase) >> 16 & 0xffff) as usize
    }

    /// Which 8-byte words of `event`'s context the probes attached at `phase` may read or write
    /// (bit `i`: bytes `8i..8i + 8`), from the verifier: a caller fills those fields and may
    /// leave the others (a clock read for a timestamp no probe reads is time lost).
    #[inline]
    pub fn context_words(&self, event: HostEvent, phase: Phase) -> u16 {
        self.state(event, phase) as u16
    }

    /// Runs every probe attached to `C`'s event at `phase`, on this thread, with `ctx` as the
    /// context (probes may write it only where the attach point allows).
    #[inline]
    pub fn fire<C: HostContext>(&self, phase: Phase, ctx: &mut C) {
        if self.armed(C::EVENT, phase) {
            self.fire_slow(C::EVENT, phase, bytemuck::bytes_of_mut(ctx));
        }
    }

    #[inline(never)]
    fn fire_slow(&self, event: HostEvent, phase: Phase, ctx: &mut [u8]) {
        let mut buf = [0u8; size_of::<LaunchCtx>()];
        let ctx =
            if event == HostEvent::Launch { self.found_device(phase, ctx, &mut buf) } else { ctx };
        // A thread that is exiting has no thread-locals left: its calls go unprobed.
        let _ = VMS.try_with(|cell| {
            let Ok(mut sets) = cell.try_borrow_mut() else {
                self.reentered.fetch_add(1, Ordering::Relaxed);
                return;
            };
            let generation = self.generation.load(Ordering::Acquire);
            let at = match sets.iter().position(|s| s.serial == self.serial) {
                Some(at) => at,
                None => {
                    let runs = Arc::new(AtomicU64::new(0));
                    self.runs.lock().unwrap_or_else(|p| p.into_inner()).push(runs.clone());
                    let generation = u64::MAX;
                    sets.push(ThreadVms { serial: self.serial, generation, vms: vec![], runs });
                    sets.len() - 1
                }
            };
            let mine = &mut sets[at];
            if mine.generation != generation {
                mine.vms = self.load_all();
                mine.generation = generation;
            }
            let (mut runs, mut faults) = (0, 0);
            for (_, _, vm) in mine.vms.iter_mut().filter(|(e, p, _)| *e == event && *p == phase) {
                match vm.run(ctx) {
                    Ok(_) => runs += 1,
                    Err(_) => faults += 1,
                }
            }
            // Written by this thread alone: a plain store, no locked instruction.
            let count = &mine.runs;
            count.store(count.load(Ordering::Relaxed) + runs, Ordering::Relaxed);
            if faults > 0 {
                self.faults.fetch_add(faults, Ordering::Relaxed);
            }
        });
    }

    /// This thread's VMs of every attached program (each was loaded once at attach, so loading
    /// it again does not fail but for lack of memory; one that does is left out and counted).
    fn load_all(&self) -> Vec<(HostEvent, Phase, Vm)> {
        let attached = self.attached.read().unwrap_or_else(|p| p.into_inner());
        attached
            .iter()
            .filter_map(|a| match Vm::with_maps(&a.verified, &a.maps, EngineChoice::Auto) {
                Ok(vm) => Some((a.event, a.phase, vm)),
                Err(_) => {
                    self.faults.fetch_add(1, Ordering::Relaxed);
                    None
                }
            })
            .collect()
    }

    /// Keeps `map` (an array of at least four `u64`) up to date with [`health`](Self::health):
    /// runs, faults, refusals, skipped fires, written by the worker thread after each sweep and
    /// by [`flush`](Self::flush), so that another process reads them live.
    pub fn mirror_health(&self, map: RawMap) {
        *self.health_mirror.lock().unwrap_or_else(|p| p.into_inner()) = Some(map);
        self.write_health_mirror();
    }

    fn write_health_mirror(&self) {
        let Ok(mirror) = self.health_mirror.try_lock() else { return };
        let Some(map) = mirror.as_ref() else { return };
        let Ok(array) = egpu_maps::Array::<u64>::from_raw(map.clone()) else { return };
        let h = self.health();
        for (i, v) in [h.runs, h.faults, h.rejected, h.reentered].into_iter().enumerate() {
            let _ = array.set(i as u32, &v);
        }
    }

    /// What the probes have done so far.
    pub fn health(&self) -> Health {
        Health {
            runs: self
                .runs
                .lock()
                .map(|r| r.iter().map(|c| c.load(Ordering::Relaxed)).sum())
                .unwrap_or(0),
            faults: self.faults.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            reentered: self.reentered.load(Ordering::Relaxed),
        }
    }
}

/// Whether `verified` calls `egpu_delay_ns`.
fn calls_delay(verified: &Verified) -> bool {
    verified.calls_helper(egpu_ebpf::helpers::id::DELAY_NS)
}

/// The context words (bit `i`: bytes `8i..8i + 8`) a verified program may touch: those its loads
/// and stores reach at constant offsets, and all of them when an access's offset varies or a
/// helper is given a pointer into the context.
fn context_words(verified: &Verified) -> u16 {
    use egpu_ebpf::Instruction;
    use egpu_ebpf::verifier::AccessRegion;
    let mut words = 0u16;
    let mut mark = |offset: Option<i64>, bytes: usize| match offset {
        Some(o) if o >= 0 => {
            let (first, last) = (o as usize / 8, (o as usize + bytes.max(1) - 1) / 8);
            for w in first..=last.min(15) {
                words |= 1 << w;
            }
        }
        _ => words = u16::MAX,
    };
    for d in verified.program().decoded() {
        let size = match d.insn {
            Instruction::Load { size, .. }
            | Instruction::Store { size, .. }
            | Instruction::Atomic { size, .. } => size.bytes(),
            _ => 0,
        };
        if let Some(a) = verified.access(d.pc).filter(|a| a.region == AccessRegion::Context) {
            mark(a.offset, size as usize);
        }
        if let Some(call) = verified.call(d.pc)
            && call.args.iter().flatten().any(|a| a.region == AccessRegion::Context)
        {
            mark(None, 0);
        }
    }
    words
}

/// The process's set: the one the preloaded library fires, and egpu's own launches
/// ([`Gpu::launch`](egpu_device::cuda::Gpu::launch), synchronously: the maps hold the launch's
/// counts when it returns).
///
/// Its locks are safe across `fork` (see `host/deferred.rs`): a program that forks while other
/// threads fire or post does not leave its child a lock no thread will release.
pub fn global() -> &'static HostProbes {
    static GLOBAL: OnceLock<HostProbes> = OnceLock::new();
    let mut made = false;
    let set = GLOBAL.get_or_init(|| {
        made = true;
        HostProbes::new()
    });
    if made {
        deferred::fork_safe(set);
        // egpu's own launches (`Gpu::launch`) fire its probes too.
        egpu_device::hooks::install(set);
    }
    set
}

impl egpu_device::hooks::Observer for HostProbes {
    fn launch(&self, phase: Phase, ctx: &mut LaunchCtx) {
        tags::fill_launch(ctx);
        self.fire(phase, ctx);
    }
}

/// Monotonic time in ns (`CLOCK_MONOTONIC`), as contexts' `timestamp_ns` takes it.
pub fn now_ns() -> u64 {
    egpu_vm::native::ktime_ns()
}

/// The calling thread's id (`gettid`), as contexts' `host_tid` takes it: asked of the kernel
/// once per thread (and again in a child made by `fork`), not at every call.
pub fn thread_id() -> u32 {
    /// Bumped in every child made by `fork`: the thread that forked keeps its cached id there.
    static FORKS: AtomicU32 = AtomicU32::new(0);
    extern "C" fn forked() {
        FORKS.fetch_add(1, Ordering::Relaxed);
    }
    static REGISTER: std::sync::Once = std::sync::Once::new();
    thread_local! {
        static TID: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((u32::MAX, 0)) };
    }
    let forks = FORKS.load(Ordering::Relaxed);
    if let Ok((seen, tid)) = TID.try_with(std::cell::Cell::get)
        && seen == forks
    {
        return tid;
    }
    REGISTER.call_once(|| {
        // SAFETY: `forked` is an `extern "C"` function that lives as long as the process and
        // only makes an atomic add.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    });
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    let _ = TID.try_with(|t| t.set((forks, tid)));
    tid
}

pub mod builtin;
pub mod cxl;
mod deferred;
pub mod elf;
/// egpu's surface as the probes of this crate name it (`#[egpu_macros::probe(..,
/// crate = crate::egpu_root)]`): this crate sits beneath the facade `egpu`, so it builds the paths
/// the generated code uses from the crates beneath the facade.
mod egpu_root {
    pub(crate) use egpu_ebpf as ebpf;
    pub(crate) use egpu_probe as probe;

    pub(crate) mod __private {
        pub(crate) use egpu_probe::build as probe;
        pub(crate) use egpu_probe::twin;
    }
}
pub mod gpu_time;
pub mod mem;
#[cfg(feature = "otlp")]
pub mod otlp;
pub mod pack;
pub mod sites;
pub mod spans;
pub mod tags;
pub use deferred::Poster;
#[cfg(test)]
mod tests;
