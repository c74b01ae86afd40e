//! The device parts of the user's maps: each map a device probe uses has a copy in GPU memory in
//! every context that loads instrumented modules, which the probes update at GPU speed, merged
//! into the map in shared memory ([`egpu::maps::merge`]) by a thread of egpu's own:
//!
//! - every [`period`] (`EGPU_MERGE_MS`, 100 ms by default): the staleness of what `egpu maps`,
//!   the metrics and host probes see, while kernels run;
//! - soon after each of the program's synchronisations, copies and queries that find the work
//!   done ([`synced`], which wakes the thread; it pauses after each merge, a millisecond or nine
//!   times the merge's time ([`pause_after`]), so wakes meanwhile are merged then), and at module
//!   unloads;
//! - before a context is destroyed or its device's primary context released or reset
//!   ([`teardown`]), and at exit ([`finish`]), after waiting for the context's work: those
//!   merges are settled, and leave the exact counts.
//!
//! A map the device probes only read is the other way round: its part is a copy of the host
//! map ([`Part::mirror`]), copied again at each merge where the host map changed ([`refresh`]),
//! never merged back; host code (a host probe, another process) writes it, kernels read it.
//!
//! The copies go through a stream of egpu's own per context (non-blocking, so it never waits for
//! the program's streams nor they for it) into pinned memory; the driver's functions are called
//! directly, so they are no events. While a stream capture is under way (CUDA graphs), nothing
//! is copied nor made: a call of egpu's could invalidate the capture. Nothing here may fail the
//! program: a part that cannot be made leaves the module uninstrumented (with the reason), a
//! merge that fails is counted.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use egpu::maps::merge::{DevicePart, Merged};
use egpu::maps::{MapKind, Placement, RawMap};

use super::boxes::{self, DeviceTable, InContext};
use crate::events::{ALLOC, CTX_SYNC, DTOH_ASYNC, HTOD, HTOD_ASYNC, STREAM_SYNC};
use crate::real::Hook;
use crate::{CuResult, Handle};

type CtxFn = unsafe extern "C" fn(*mut Handle) -> CuResult;
type PushFn = unsafe extern "C" fn(Handle) -> CuResult;
type StreamCreateFn = unsafe extern "C" fn(*mut Handle, c_uint) -> CuResult;
type AllocHostFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> CuResult;
type DeviceFn = unsafe extern "C" fn(*mut c_int) -> CuResult;
type StateFn = unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> CuResult;
static CTX_GET_CURRENT: Hook<CtxFn> = Hook::new(c"cuCtxGetCurrent", std::ptr::null_mut);
pub(crate) static CTX_PUSH: Hook<PushFn> = Hook::new(c"cuCtxPushCurrent_v2", std::ptr::null_mut);
pub(crate) static CTX_POP: Hook<CtxFn> = Hook::new(c"cuCtxPopCurrent_v2", std::ptr::null_mut);
static STREAM_CREATE: Hook<StreamCreateFn> = Hook::new(c"cuStreamCreate", std::ptr::null_mut);
static ALLOC_HOST: Hook<AllocHostFn> = Hook::new(c"cuMemAllocHost_v2", std::ptr::null_mut);
pub(crate) static CTX_GET_DEVICE: Hook<DeviceFn> = Hook::new(c"cuCtxGetDevice", std::ptr::null_mut);
static PRIMARY_STATE: Hook<StateFn> = Hook::new(c"cuDevicePrimaryCtxGetState", std::ptr::null_mut);

/// `CU_STREAM_NON_BLOCKING`: a stream that does not wait for the legacy default stream.
const NON_BLOCKING: c_uint = 1;

/// One map's part in one context.
struct Part {
    /// Index of the map among the user's maps.
    map: usize,
    raw: RawMap,
    /// The part's address on the device.
    device: u64,
    /// Where its snapshot goes in the context's staging memory.
    staging: usize,
    merge: DevicePart,
    /// The context's device's own copy of the map ([`own_map`]), which the merges also add to:
    /// what that device did alone. `None` for a ring, a mirrored part, or an unknown device.
    own: Option<RawMap>,
    /// For a map the device probes only read: the host map's bytes as last copied to the part,
    /// which is a copy of the host map, refreshed when the host map changes
    /// ([`refresh`]), never merged back (its staging memory is the copies' source).
    mirror: Option<Vec<u8>>,
}

/// The parts of one context, its stream and staging memory.
struct Context {
    pid: u32,
    context: usize,
    /// The context's device (its ordinal's `CUdevice`), -1 when the driver did not say.
    device: c_int,
    stream: usize,
    /// Pinned host memory, `staging_len` bytes.
    staging: usize,
    staging_len: usize,
    parts: Vec<Part>,
    /// The context's table of tensor map boxes ([`boxes`]).
    table: DeviceTable,
}

// SAFETY: the handles and the pinned memory are the driver's, usable from any thread; only the
// merge (under the lock) touches the staging memory.
unsafe impl Send for Context {}

static CONTEXTS: Mutex<Vec<Context>> = Mutex::new(Vec::new());
/// Each device's own copies of the maps ([`own_map`]): process, device, map name, the map. Kept
/// for the process's life (a map dropped would remove its shared object), a fork's parent's
/// included.
static OWN: Mutex<Vec<(u32, u32, String, RawMap)>> = Mutex::new(Vec::new());
static MERGER: OnceLock<Thread> = OnceLock::new();
/// Whether any part exists: what [`synced`] checks first.
static ANY: AtomicBool = AtomicBool::new(false);
/// Set at exit: the merger merges no more.
static STOPPED: AtomicBool = AtomicBool::new(false);

/// What the merges did, for the summary.
static MERGES: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static PUBLISHED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static DRAINED: AtomicU64 = AtomicU64::new(0);
/// Copies of mirrored parts' host maps made after they changed.
static REFRESHED: AtomicU64 = AtomicU64::new(0);

fn lock() -> MutexGuard<'static, Vec<Context>> {
    CONTEXTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The lock on the parts, then the one on the table of tensor map boxes, then the devices' own
/// maps', for `fork` (held across it, as the library's other locks).
pub(crate) fn fork_guard() -> Box<dyn std::any::Any> {
    let parts = lock();
    let boxes = boxes::lock();
    Box::new((parts, boxes, OWN.lock().unwrap_or_else(|p| p.into_inner())))
}

/// Whether there are parts: synchronisations then wake the merger ([`synced`]).
#[inline(always)]
pub(crate) fn merging() -> bool {
    ANY.load(Ordering::Relaxed)
}

/// How often the merger merges while nothing wakes it: `EGPU_MERGE_MS` (milliseconds, at least
/// 1), 100 by default.
pub(crate) fn period() -> Duration {
    let ms = std::env::var("EGPU_MERGE_MS").ok().and_then(|v| v.parse::<u64>().ok());
    Duration::from_millis(ms.unwrap_or(100).max(1))
}

/// Whether a stream capture is under way in the process: a copy or a synchronisation of egpu's
/// then could invalidate it (a capture in the global mode forbids other threads' unsafe calls),
/// so the merger waits for its end.
pub(super) fn capturing() -> bool {
    crate::defaults::HOT.captures.load(Ordering::Relaxed) > 0
}

/// The current context, if one is.
pub(crate) fn current_context() -> Option<Handle> {
    let get_current = CTX_GET_CURRENT.get_or_ask()?;
    let mut context: Handle = std::ptr::null_mut();
    // SAFETY: the driver writes one handle.
    let asked = unsafe { get_current(&mut context) };
    (asked == 0 && !context.is_null()).then_some(context)
}

/// Checks a driver call's result.
pub(super) fn cu(result: CuResult, what: &str) -> Result<(), String> {
    if result == 0 { Ok(()) } else { Err(format!("{what} returned {result}")) }
}

/// The device addresses of the parts of `maps[i]` for each `(i, copies, mirrored)` in `used`
/// (with `copies` per-SM copies of its slots; `mirrored`: a map the device probes only read),
/// in the caller's current context, made the first time (uploaded empty, or a copy of the host
/// map when mirrored), with the merger started; the other entries are 0. Then the address of the
/// context's table of tensor map boxes, brought up to date first when it is stale and no
/// capture is under way.
pub(crate) fn addresses(
    maps: &[(String, RawMap)],
    used: &[(usize, u32, bool)],
) -> Result<(Vec<u64>, u64), String> {
    let context = current_context().ok_or("no current context to put the maps in")?;
    // Asked before the lock (the device is labelled the first time, under other locks).
    let device = crate::events::devices::current().map_or(-1, |d| d as c_int);
    let pid = std::process::id();
    let mut contexts = lock();
    let index = match contexts.iter().position(|c| c.pid == pid && c.context == context as usize) {
        Some(i) => i,
        None if capturing() => {
            // Allocating and copying now could invalidate the capture.
            return Err("a module loaded during a stream capture: its maps' GPU memory is made \
                        outside captures"
                .into());
        }
        None => {
            contexts.push(make(context, device, maps, used)?);
            ANY.store(true, Ordering::Release);
            start_merger();
            contexts.len() - 1
        }
    };
    let mut out = vec![0; maps.len()];
    for part in &contexts[index].parts {
        out[part.map] = part.device;
    }
    if used.iter().any(|&(i, _, _)| out[i] == 0) {
        return Err("a map was added after the context's parts were made".into());
    }
    let table = contexts[index].table.address;
    update_locked(&mut contexts, None);
    Ok((out, table))
}

/// After the process's table of tensor map boxes changed slot `slot` (`None`: none, but a
/// table is stale): every context's table brought up to date ([`boxes::update`]).
pub(super) fn update_tables(slot: Option<usize>) {
    update_locked(&mut lock(), slot);
}

/// [`update_tables`], under the lock the caller holds.
fn update_locked(contexts: &mut [Context], slot: Option<usize>) {
    let pid = std::process::id();
    let tables = contexts.iter_mut().filter(|c| c.pid == pid).map(|c| InContext {
        context: c.context as Handle,
        stream: c.stream as Handle,
        table: &mut c.table,
    });
    boxes::update(tables, slot, capturing());
}

/// Makes the parts of `maps[used]` in `context` (the current one, on `device`; -1: the driver
/// did not say): device memory holding an empty map each (a copy of the host map for a mirrored
/// one), a stream, pinned staging memory, and the table of tensor map boxes.
fn make(
    context: Handle,
    device: c_int,
    maps: &[(String, RawMap)],
    used: &[(usize, u32, bool)],
) -> Result<Context, String> {
    let missing = |name: &str| format!("the driver lacks {name}");
    let alloc = ALLOC.get_or_ask().ok_or_else(|| missing("cuMemAlloc"))?;
    let upload = HTOD.get_or_ask().ok_or_else(|| missing("cuMemcpyHtoD"))?;
    let alloc_host = ALLOC_HOST.get_or_ask().ok_or_else(|| missing("cuMemAllocHost"))?;
    let create = STREAM_CREATE.get_or_ask().ok_or_else(|| missing("cuStreamCreate"))?;
    let mut parts = Vec::new();
    let mut staging_len = 0;
    for &(map, copies, mirrored) in used {
        let raw = maps[map].1.clone();
        let merge = match copies {
            0 => DevicePart::new(raw.geometry()),
            n => DevicePart::spread(raw.geometry(), n),
        }
        // An array's part starts from the map's values (global data's first contents).
        .and_then(|part| match raw.kind() {
            MapKind::Array => part.from_values(&raw),
            _ => Ok(part),
        })
        .map_err(|e| format!("map {} on the GPU: {e}", maps[map].0))?;
        let mirror = mirrored.then(|| host_bytes(&raw));
        let own = match (mirrored, raw.kind(), u32::try_from(device)) {
            (false, kind, Ok(device)) if kind != MapKind::RingBuf => {
                own_map(device, &maps[map].0, &raw)
            }
            _ => None,
        };
        let image = mirror.clone().unwrap_or_else(|| merge.image());
        let mut device = 0u64;
        // SAFETY: the driver writes one address.
        cu(unsafe { alloc(&mut device, image.len()) }, "cuMemAlloc")?;
        // SAFETY: `image.len()` bytes from `image` to the memory just allocated, of that size.
        cu(unsafe { upload(device, image.as_ptr().cast(), image.len()) }, "cuMemcpyHtoD")?;
        let staged = mirror.as_ref().map_or(merge.range().len(), Vec::len);
        let merge = merge.clone();
        parts.push(Part { map, raw, device, staging: staging_len, merge, own, mirror });
        staging_len += staged;
    }
    let mut stream: Handle = std::ptr::null_mut();
    // SAFETY: the driver writes one handle.
    cu(unsafe { create(&mut stream, NON_BLOCKING) }, "cuStreamCreate")?;
    super::mem::saw_device(device);
    let mut staging: *mut c_void = std::ptr::null_mut();
    // SAFETY: the driver writes one pointer to `staging_len` bytes (at least 8).
    cu(unsafe { alloc_host(&mut staging, staging_len.max(8)) }, "cuMemAllocHost")?;
    let table = DeviceTable::make()?;
    Ok(Context {
        pid: std::process::id(),
        context: context as usize,
        device,
        stream: stream as usize,
        staging: staging as usize,
        staging_len,
        parts,
        table,
    })
}

/// Device `device`'s own copy of map `name` (`raw`, the map the parts merge into), made empty
/// the first time a context of the device makes its parts, in shared memory as
/// `egpu-PID-udD-NAME` (`builtin::device_map_name`; in this process's memory with
/// `EGPU_SHARED=0`): every part of that device's contexts adds to it what it adds to the map, so
/// that it holds what the device did and the devices' copies sum to the map (with the host's
/// writes). `None` when it cannot be made (the map is merged all the same).
fn own_map(device: u32, name: &str, raw: &RawMap) -> Option<RawMap> {
    let pid = std::process::id();
    let mut own = OWN.lock().unwrap_or_else(|p| p.into_inner());
    let known = own.iter().find(|(p, d, n, _)| *p == pid && *d == device && n == name);
    if let Some((_, _, _, map)) = known {
        return Some(map.clone());
    }
    let shared = std::env::var_os("EGPU_SHARED").is_none_or(|v| v != "0");
    let object = egpu::host::builtin::device_map_name(pid, device, name);
    let made = match shared {
        true => {
            let _ = egpu::maps::unlink_shared(&object);
            RawMap::create(*raw.geometry(), &Placement::Shared(object.into()))
        }
        false => RawMap::create(*raw.geometry(), &Placement::Process),
    };
    let map = made.ok()?;
    own.push((pid, device, name.to_owned(), map.clone()));
    Some(map)
}

/// This process's devices' own copies of the maps ([`own_map`]): device, map name, map.
pub(crate) fn own_maps() -> Vec<(u32, String, RawMap)> {
    let pid = std::process::id();
    let own = OWN.lock().unwrap_or_else(|p| p.into_inner());
    own.iter().filter(|o| o.0 == pid).map(|(_, d, n, m)| (*d, n.clone(), m.clone())).collect()
}

/// Starts the merger thread, once per process image.
fn start_merger() {
    MERGER.get_or_init(|| {
        let period = period();
        let spawned = std::thread::Builder::new().name("egpu-merge".into()).spawn(move || {
            while !STOPPED.load(Ordering::Relaxed) {
                std::thread::park_timeout(period);
                let start = std::time::Instant::now();
                merge_all(false, |_| true);
                // A wake meanwhile (a synchronisation right after an asynchronous copy, say) is
                // kept, and merged after this pause.
                std::thread::sleep(pause_after(start.elapsed(), period));
            }
        });
        match spawned {
            Ok(handle) => handle.thread().clone(),
            Err(_) => std::thread::current(),
        }
    });
}

/// Copies the maps the device probes only read to their parts in every context of this process
/// whose host map changed, now (not during a stream capture): what a host write that kernels
/// launched next must see asks for (the `allocs` set's table).
pub(crate) fn refresh_mirrors() {
    if capturing() {
        return;
    }
    let pid = std::process::id();
    let mut contexts = lock();
    for c in contexts.iter_mut().filter(|c| c.pid == pid) {
        if let Err(reason) = refresh(c)
            && FAILED.fetch_add(1, Ordering::Relaxed) == 0
            && crate::log_enabled("maps")
        {
            eprintln!("egpu: copying the host's maps to the device: {reason}");
        }
    }
}

/// The merger's pause after a merge that took `took`: a millisecond, or nine times the merge's
/// time, so that a program that synchronises all the time keeps the merger busy a tenth of the
/// time at most (a merge copies every part, per-SM copies included, to the host: 36 MiB with
/// the `counts` set), but never longer than the `period` between merges.
fn pause_after(took: Duration, period: Duration) -> Duration {
    (took * 9).clamp(Duration::from_millis(1), period.max(Duration::from_millis(1)))
}

/// After one of the program's synchronisations or copies: wakes the merger (a few loads when
/// there are no parts; an atomic swap when the merger is not waiting, else a system call).
#[inline]
pub(crate) fn synced() {
    crate::kernel_times::synced();
    if !ANY.load(Ordering::Relaxed) {
        return;
    }
    wake();
}

#[cold]
#[inline(never)]
fn wake() {
    if let Some(merger) = MERGER.get() {
        if crate::log_enabled("merges") {
            eprintln!("egpu: merger woken {}", egpu::maps::merge::wall_clock_ns());
        }
        merger.unpark();
    }
}

/// What goes in a teardown: a context, or a device's primary context.
#[derive(Clone, Copy)]
pub(crate) enum Teardown {
    /// `cuCtxDestroy`.
    Context(Handle),
    /// `cuDevicePrimaryCtxRelease` (the context goes when its last user releases it).
    Release(c_int),
    /// `cuDevicePrimaryCtxReset`.
    Reset(c_int),
}

impl Teardown {
    fn covers(self, c: &Context) -> bool {
        self.takes(c.context, c.device)
    }

    /// Whether it takes down `context`, on `device` (-1: not known, taken with any device's
    /// primary context).
    pub(crate) fn takes(self, context: usize, device: c_int) -> bool {
        match self {
            Teardown::Context(h) => context == h as usize,
            Teardown::Release(d) | Teardown::Reset(d) => device == d || device < 0,
        }
    }
}

/// A teardown, `call` (the driver's function): first a settled merge of the parts it may take;
/// after it, the parts of contexts that are gone are forgotten (their memory went with the
/// context; a context made later, even under the same handle, gets parts of its own). The lock
/// on the parts is held throughout, so that the merger never copies from a context in between.
pub(crate) fn teardown(what: Teardown, call: impl FnOnce() -> CuResult) -> CuResult {
    crate::kernel_times::teardown(what);
    if !merging() {
        return call();
    }
    let mut contexts = lock();
    merge_locked(&mut contexts, true, |c| what.covers(c));
    let result = call();
    let gone = match what {
        Teardown::Release(device) => {
            let (mut flags, mut active) = (0, 1);
            // SAFETY: the driver writes a flags word and a flag.
            PRIMARY_STATE.get_or_ask().is_none_or(|state| unsafe {
                state(device, &mut flags, &mut active) != 0 || active == 0
            })
        }
        _ => true,
    };
    if gone {
        contexts.retain(|c| !what.covers(c));
    }
    result
}

/// At exit: a settled merge of every part, after each context's work; the merger stops.
pub(crate) fn finish() {
    STOPPED.store(true, Ordering::Relaxed);
    if merging() {
        merge_all(true, |_| true);
    }
}

/// Merges the parts of every context of this process that `which` picks: `settled` after
/// waiting for the context's work. Once stopped, only settled merges run.
fn merge_all(settled: bool, which: impl Fn(&Context) -> bool) {
    if (STOPPED.load(Ordering::Relaxed) || capturing()) && !settled {
        return;
    }
    merge_locked(&mut lock(), settled, which);
}

/// [`merge_all`], under the lock the caller holds.
fn merge_locked(contexts: &mut [Context], settled: bool, which: impl Fn(&Context) -> bool) {
    let pid = std::process::id();
    for c in contexts.iter_mut().filter(|c| c.pid == pid && which(c)) {
        if let Err(reason) = refresh(c)
            && FAILED.fetch_add(1, Ordering::Relaxed) == 0
            && crate::log_enabled("maps")
        {
            eprintln!("egpu: copying the host's maps to the device: {reason}");
        }
        match snapshot(c, settled) {
            Ok(()) => {
                // SAFETY: the staging memory is `staging_len` bytes, written by the copies just
                // finished, and only read under the lock.
                let staging =
                    unsafe { std::slice::from_raw_parts(c.staging as *const u8, c.staging_len) };
                let log = crate::log_enabled("merges");
                for part in c.parts.iter_mut().filter(|p| p.mirror.is_none()) {
                    let len = part.merge.range().len();
                    let bytes = &staging[part.staging..part.staging + len];
                    match part.merge.merge_into(bytes, &part.raw, part.own.as_ref(), settled) {
                        Ok(m) => {
                            count(&m);
                            if log {
                                eprintln!(
                                    "egpu: merge {} map {} settled {settled}: {m:?}",
                                    egpu::maps::merge::wall_clock_ns(),
                                    part.map
                                );
                            }
                        }
                        Err(_) => {
                            FAILED.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                MERGES.fetch_add(1, Ordering::Relaxed);
                if let Err(reason) = write_tails(c)
                    && FAILED.fetch_add(1, Ordering::Relaxed) == 0
                    && crate::log_enabled("maps")
                {
                    eprintln!("egpu: giving the device rings their room: {reason}");
                }
            }
            Err(reason) => {
                if FAILED.fetch_add(1, Ordering::Relaxed) == 0 && crate::log_enabled("maps") {
                    eprintln!("egpu: merging the device maps: {reason}");
                }
            }
        }
    }
}

fn count(m: &Merged) {
    PUBLISHED.fetch_add(m.published, Ordering::Relaxed);
    REFUSED.fetch_add(m.refused, Ordering::Relaxed);
    DRAINED.fetch_add(m.records, Ordering::Relaxed);
}

/// Runs `f` with `context` current (pushed, then popped whatever `f` returns): egpu's copies
/// into and out of a context's memory, on its stream.
pub(super) fn in_context(
    context: Handle,
    f: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let missing = |name: &str| format!("the driver lacks {name}");
    let push = CTX_PUSH.get_or_ask().ok_or_else(|| missing("cuCtxPushCurrent"))?;
    let pop = CTX_POP.get_or_ask().ok_or_else(|| missing("cuCtxPopCurrent"))?;
    // SAFETY: a context this process made parts in (the driver checks it still exists).
    cu(unsafe { push(context) }, "cuCtxPushCurrent")?;
    let done = f();
    let mut popped: Handle = std::ptr::null_mut();
    // SAFETY: the context pushed above.
    unsafe { pop(&mut popped) };
    done
}

/// Writes the `tail`s the merge moved in the rings' parts back to the GPU, through the
/// context's stream (so before its next snapshot), from the staging memory (which that snapshot
/// overwrites only after these copies): the device producers' room.
fn write_tails(c: &mut Context) -> Result<(), String> {
    let mut moved = Vec::new();
    for part in &mut c.parts {
        let start = part.merge.range().start;
        for (at, tail) in part.merge.tails() {
            moved.push((part.device + at as u64, c.staging + part.staging + (at - start), tail));
        }
    }
    if moved.is_empty() {
        return Ok(());
    }
    let copy = HTOD_ASYNC.get_or_ask().ok_or("the driver lacks cuMemcpyHtoDAsync")?;
    in_context(c.context as Handle, || {
        moved.into_iter().try_for_each(|(device, staging, tail)| {
            // SAFETY: `staging` is an 8-byte aligned word of the context's pinned staging
            // memory (the part's snapshot of its ring header), only touched under the lock.
            unsafe { (staging as *mut u64).write(tail.to_le()) };
            // SAFETY: 8 bytes from pinned memory to the ring's `tail` word in the part.
            let result = unsafe { copy(device, staging as *const c_void, 8, c.stream as Handle) };
            cu(result, "cuMemcpyHtoDAsync")
        })
    })
}

/// The bytes of the host map `raw`, as they are now.
fn host_bytes(raw: &RawMap) -> Vec<u8> {
    let (ptr, len) = raw.memory();
    let mut bytes = vec![0u8; len];
    // SAFETY: the map's memory is `len` readable bytes while `raw` lives, copied without a Rust
    // reference to it: other writers' updates meanwhile are seen or not (a snapshot of words).
    unsafe { std::ptr::copy_nonoverlapping(ptr.as_ptr(), bytes.as_mut_ptr(), len) };
    bytes
}

/// Copies each mirrored part's host map to the device where it changed since the last copy,
/// through the context's stream and its pinned staging memory (where the host map is copied
/// first, then compared), and waits for the copies. Kernels running meanwhile see the old bytes
/// or the new.
fn refresh(c: &mut Context) -> Result<(), String> {
    let mut changed = Vec::new();
    for (i, part) in c.parts.iter_mut().enumerate() {
        let Some(mirror) = &mut part.mirror else { continue };
        let (ptr, len) = part.raw.memory();
        let staged = (c.staging + part.staging) as *mut u8;
        // SAFETY: the part's staging memory has room for the map's `len` bytes (`make`) and is
        // only touched under the lock; the map's memory is `len` readable bytes, copied
        // without a Rust reference to it.
        let now = unsafe {
            std::ptr::copy_nonoverlapping(ptr.as_ptr(), staged, len);
            std::slice::from_raw_parts(staged, len)
        };
        if now != mirror.as_slice() {
            mirror.copy_from_slice(now);
            changed.push(i);
        }
    }
    if changed.is_empty() {
        return Ok(());
    }
    let missing = |name: &str| format!("the driver lacks {name}");
    let copy = HTOD_ASYNC.get_or_ask().ok_or_else(|| missing("cuMemcpyHtoDAsync"))?;
    let wait = STREAM_SYNC.get_or_ask().ok_or_else(|| missing("cuStreamSynchronize"))?;
    let copied = in_context(c.context as Handle, || {
        for &i in &changed {
            let part = &c.parts[i];
            let len = part.mirror.as_ref().map_or(0, Vec::len);
            let from = (c.staging + part.staging) as *const c_void;
            // SAFETY: `len` bytes of pinned staging memory to the part, which is that long.
            cu(unsafe { copy(part.device, from, len, c.stream as Handle) }, "cuMemcpyHtoDAsync")?;
        }
        // SAFETY: egpu's own stream.
        cu(unsafe { wait(c.stream as Handle) }, "cuStreamSynchronize")
    });
    REFRESHED.fetch_add(changed.len() as u64, Ordering::Relaxed);
    copied
}

/// Copies every part of `c` into its staging memory, through its stream, and waits for the
/// copies; first for the context's work when `settled`.
fn snapshot(c: &Context, settled: bool) -> Result<(), String> {
    let missing = |name: &str| format!("the driver lacks {name}");
    let copy = DTOH_ASYNC.get_or_ask().ok_or_else(|| missing("cuMemcpyDtoHAsync"))?;
    let wait = STREAM_SYNC.get_or_ask().ok_or_else(|| missing("cuStreamSynchronize"))?;
    in_context(c.context as Handle, || {
        if settled {
            let sync = CTX_SYNC.get_or_ask().ok_or_else(|| missing("cuCtxSynchronize"))?;
            // SAFETY: no arguments; waits for the (current) context's work.
            cu(unsafe { sync() }, "cuCtxSynchronize")?;
        }
        for part in c.parts.iter().filter(|p| p.mirror.is_none()) {
            let range = part.merge.range();
            let to = (c.staging + part.staging) as *mut c_void;
            let from = part.device + range.start as u64;
            // SAFETY: the part's device memory holds the map's bytes, `range` within them; the
            // staging memory has room at `part.staging` for them.
            cu(unsafe { copy(to, from, range.len(), c.stream as Handle) }, "cuMemcpyDtoHAsync")?;
        }
        // SAFETY: egpu's own stream.
        cu(unsafe { wait(c.stream as Handle) }, "cuStreamSynchronize")
    })
}

/// The summary's line on the device parts, when there are any.
pub(crate) fn summary() -> String {
    let contexts = lock();
    let ours: Vec<&Context> = contexts.iter().filter(|c| c.pid == std::process::id()).collect();
    if ours.is_empty() {
        return String::new();
    }
    let parts = ours.iter().map(|c| c.parts.len()).sum::<usize>();
    let spread = ours.iter().flat_map(|c| &c.parts).filter(|p| p.merge.copies() > 0).count();
    let mirrored = ours.iter().flat_map(|c| &c.parts).filter(|p| p.mirror.is_some()).count();
    format!(
        "device maps contexts {} parts {parts} spread {spread} merges {} failed {} published {} \
         refused {} drained {} mirrored {mirrored} refreshed {}\n",
        ours.len(),
        MERGES.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed),
        PUBLISHED.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed),
        DRAINED.load(Ordering::Relaxed),
        REFRESHED.load(Ordering::Relaxed),
    ) + &by_device(&ours)
}

/// The summary's line per device of the contexts with parts (each context's parts are that
/// device's own copies of the maps, merged into the maps on the host): `device maps on device D
/// contexts C parts P` (`D` -1: the driver did not say).
fn by_device(ours: &[&Context]) -> String {
    let mut devices: Vec<c_int> = ours.iter().map(|c| c.device).collect();
    devices.sort_unstable();
    devices.dedup();
    let mut text = String::new();
    for d in devices {
        let on: Vec<&&Context> = ours.iter().filter(|c| c.device == d).collect();
        let parts = on.iter().map(|c| c.parts.len()).sum::<usize>();
        text.push_str(&format!("device maps on device {d} contexts {} parts {parts}\n", on.len()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::pause_after;
    use std::time::Duration;

    #[test]
    fn the_merger_pauses_nine_times_a_merge_between_a_millisecond_and_the_period() {
        let ms = Duration::from_millis;
        let period = ms(100);
        assert_eq!(pause_after(Duration::from_micros(20), period), ms(1));
        assert_eq!(pause_after(ms(4), period), ms(36));
        assert_eq!(pause_after(ms(50), period), period);
        // A period shorter than a millisecond still pauses one.
        assert_eq!(pause_after(ms(4), Duration::ZERO), ms(1));
    }
}
