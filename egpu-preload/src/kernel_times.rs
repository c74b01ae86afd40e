//! Kernel GPU time from CUDA events, opt-in (`EGPU_KERNEL_TIMES=1`; `egpu run --kernel-times`):
//! every kernel launch the library sees (`cuLaunchKernel`, `cuLaunchKernelEx`, their `_ptsz`
//! flavours, and so the CUDA runtime's launches, which reach the driver through them), with or
//! without device probes, gets a pair of events recorded on its stream right before and right
//! after it, and the time between them is added to the built-in map `kernel_times` (a histogram
//! per kernel, [`egpu::host::builtin::KernelTime`]). Kernels without PTX (cuBLAS, ATen) have no
//! device probes: this is how they are timed.
//!
//! - **Pooled**: each context keeps its pairs (made with `cuEventCreate`'s default flags, so
//!   that they time), reused once harvested; up to `EGPU_KERNEL_TIMES_PAIRS` (4096 by default)
//!   per context are made, none per launch in the steady state. When all are in flight, those
//!   finished are harvested on the spot (after a harvest under way); if none is, the launch
//!   goes untimed and is counted ([`TimingCount::PoolFull`]).
//! - **Harvested without blocking**: `cuEventQuery` on the end event, then
//!   `cuEventElapsedTime`, by a thread of egpu's own (`egpu-times`) on the merger's clock
//!   (`EGPU_MERGE_MS`) and woken after the program's synchronisations; before a context is torn
//!   down and at exit the pairs still in flight are waited for (`cuEventSynchronize`), as the
//!   teardown would wait for the work anyway.
//! - **Never in a capture**: a launch on a stream that is capturing is not timed (an event
//!   recorded there would become a node of the graph), and counted ([`TimingCount::Captured`]);
//!   nothing is harvested while a capture is under way (a query could invalidate it).
//! - **Never fatal**: an event call that fails is counted ([`TimingCount::Failed`]) and the
//!   launch goes on untimed; a launch that fails is not timed.
//! - **Loading left out**: a function's first timed launch in a context loads it first
//!   (`cuFuncLoad`, where the driver has it), so that the pair does not time the driver loading
//!   its code on the stream (lazy loading, CUDA's default).
//!
//! - **Spans' times**: a launch whose span is recorded (`attribution::spans`) has it attached to
//!   its pair and written at the harvest, its start and end the events' mapped to wall time by
//!   the context's anchor ([`anchor`]: an event recorded on an idle stream of egpu's own when the
//!   pool is made, and waited for); without an anchor, the host call's times.
//!
//! The cost: two `cuEventRecord` calls and two short locks per launch, every driver call taken
//! the whole way (no trampoline fast path), and a query and an elapsed-time call per launch on
//! egpu's thread; with it, the launch's own time on the host grows by the two records'. A
//! synchronisation is timed too (the `time_syncs` built-in probe, reading the clock twice).

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::{c_float, c_int, c_uint};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::Thread;

use egpu::host::builtin::TimingCount;
use egpu::host::spans::{CLOCK_GPU_EVENTS, SpanRecord};

use crate::device::Teardown;
use crate::real::Hook;
use crate::{CuResult, Handle};

type CreateFn = unsafe extern "C" fn(*mut Handle, c_uint) -> CuResult;
type RecordFn = unsafe extern "C" fn(Handle, Handle) -> CuResult;
type EventFn = unsafe extern "C" fn(Handle) -> CuResult;
type ElapsedFn = unsafe extern "C" fn(*mut c_float, Handle, Handle) -> CuResult;
static CREATE: Hook<CreateFn> = Hook::new(c"cuEventCreate", std::ptr::null_mut);
static RECORD: Hook<RecordFn> = Hook::new(c"cuEventRecord", std::ptr::null_mut);
static ELAPSED: Hook<ElapsedFn> = Hook::new(c"cuEventElapsedTime", std::ptr::null_mut);
static DESTROY: Hook<EventFn> = Hook::new(c"cuEventDestroy_v2", std::ptr::null_mut);
type StreamCreateFn = unsafe extern "C" fn(*mut Handle, c_uint) -> CuResult;
/// For the anchor of the spans' GPU times ([`anchor`]).
static STREAM_CREATE: Hook<StreamCreateFn> = Hook::new(c"cuStreamCreate", std::ptr::null_mut);
/// `cuFuncLoad` (CUDA 12.4 and later): a function's first launch loads it first (see
/// [`time_launch`]).
static FUNC_LOAD: Hook<EventFn> = Hook::new(c"cuFuncLoad", std::ptr::null_mut);
// `cuEventQuery` and `cuEventSynchronize` are interposed: the table's hooks keep the driver's.
use crate::events::{EVENT_QUERY, EVENT_SYNC};

/// `CUDA_ERROR_NOT_READY`: the event's work is not done yet.
const NOT_READY: CuResult = 600;
/// `CU_STREAM_PER_THREAD`: the calling thread's default stream, as a `_ptsz` launch on the null
/// stream means.
const STREAM_PER_THREAD: usize = 2;
/// Pairs per context when `EGPU_KERNEL_TIMES_PAIRS` does not say.
const PAIRS: usize = 4096;

/// 0: not read yet; 1: off; 2: on.
static ON: AtomicU8 = AtomicU8::new(0);

/// Whether the kernel times are on (`EGPU_KERNEL_TIMES` set, and not to `0` or empty).
#[inline]
pub(crate) fn enabled() -> bool {
    match ON.load(Ordering::Relaxed) {
        2 => true,
        1 => false,
        _ => read_enabled(),
    }
}

#[cold]
fn read_enabled() -> bool {
    let on = std::env::var_os("EGPU_KERNEL_TIMES").is_some_and(|v| !v.is_empty() && v != "0");
    ON.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    on
}

/// The pairs a context may have: `EGPU_KERNEL_TIMES_PAIRS` (at least 1), else 4096.
fn capacity() -> usize {
    static PAIRS_MADE: OnceLock<usize> = OnceLock::new();
    *PAIRS_MADE.get_or_init(|| {
        let asked = std::env::var("EGPU_KERNEL_TIMES_PAIRS").ok().and_then(|v| v.parse().ok());
        asked.unwrap_or(PAIRS).max(1)
    })
}

/// Two events, `CUevent`s, as addresses.
#[derive(Clone, Copy)]
struct Pair {
    start: usize,
    end: usize,
}

/// A pair in flight: the kernel whose launch it brackets, the launch's site and tag (for
/// `attribution::gpu_time`), and its span when its thread had a trace context
/// (`attribution::spans`), given its times at the harvest.
type Pending = (Pair, Launch, Option<Box<SpanRecord>>);

/// What a timed launch's GPU time is added to: its kernel, its site (0: none) and tag (0: none).
#[derive(Clone, Copy)]
struct Launch {
    kernel: u64,
    site: u64,
    tag: u64,
}

/// One context's pairs.
struct Pool {
    pid: u32,
    context: usize,
    /// Its device, -1 when the driver did not say.
    device: c_int,
    free: Vec<Pair>,
    /// Pairs made and not destroyed.
    made: usize,
    /// In launch order.
    pending: VecDeque<Pending>,
    /// The functions launched in it (`CUfunction`s, as addresses).
    launched: std::collections::HashSet<usize>,
    /// An event of its and when it completed, on `CLOCK_REALTIME`, made with the pool when
    /// spans are on ([`anchor`]).
    anchor: Option<(usize, u64)>,
}

// SAFETY: the events are the driver's handles, usable from any thread.
unsafe impl Send for Pool {}

static POOLS: Mutex<Vec<Pool>> = Mutex::new(Vec::new());
/// Held by the one harvest at a time.
static HARVESTING: Mutex<()> = Mutex::new(());
static HARVESTER: OnceLock<Thread> = OnceLock::new();
/// Set at exit: the harvester stops.
static STOPPED: AtomicBool = AtomicBool::new(false);
/// Counts not yet added to the map `kernel_timing`, by [`TimingCount`] slot.
static COUNTS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

fn pools() -> MutexGuard<'static, Vec<Pool>> {
    POOLS.lock().unwrap_or_else(|p| p.into_inner())
}

fn count(what: TimingCount) {
    COUNTS[what as usize].fetch_add(1, Ordering::Relaxed);
}

/// The locks of the kernel times, for `fork` (taken before the library's others, in the order
/// a harvest takes them).
pub(crate) fn fork_guard() -> Box<dyn std::any::Any> {
    let harvesting = HARVESTING.lock().unwrap_or_else(|p| p.into_inner());
    Box::new((harvesting, pools()))
}

thread_local! {
    /// Whether this thread is inside a launch being timed: a launch the driver makes inside it
    /// is timed by the outer one's events.
    static TIMING: Cell<bool> = const { Cell::new(false) };
    /// The span offered for the launch under way ([`offer_span`]).
    static SPAN: Cell<Option<SpanRecord>> = const { Cell::new(None) };
}

/// `call`, a launch of `f` on `stream` (the null stream meaning the thread's own when
/// `per_thread`: a `_ptsz` flavour), timed by a pair of events when the kernel times are on.
#[inline(always)]
pub(crate) fn around(
    f: Handle,
    stream: Handle,
    per_thread: bool,
    call: impl FnOnce() -> CuResult,
) -> impl FnOnce() -> CuResult {
    move || {
        let call = move || if enabled() { timed(f, stream, per_thread, call) } else { call() };
        crate::attribution::spans::around(f, call)
    }
}

#[cold]
#[inline(never)]
fn timed(f: Handle, stream: Handle, per_thread: bool, call: impl FnOnce() -> CuResult) -> CuResult {
    let Ok(outer) = TIMING.try_with(|t| t.replace(true)) else { return call() };
    if outer {
        return call();
    }
    let result = time_launch(f, stream, per_thread, call);
    let _ = TIMING.try_with(|t| t.set(false));
    result
}

fn time_launch(
    f: Handle,
    stream: Handle,
    per_thread: bool,
    call: impl FnOnce() -> CuResult,
) -> CuResult {
    let stream = if stream.is_null() && per_thread { STREAM_PER_THREAD as Handle } else { stream };
    if crate::events::captured(stream) != 0 {
        count(TimingCount::Captured);
        return call();
    }
    let (Some(context), Some(record)) = (crate::device::current_context(), RECORD.get_or_ask())
    else {
        count(TimingCount::Failed);
        return call();
    };
    let Some((pair, first)) = take(context, f) else { return call() };
    if first && let Some(load) = FUNC_LOAD.get_or_ask() {
        // A function's first launch loads it (lazy loading, CUDA's default): done before the
        // pair, whose time is the kernel's. Without it the mean of the six launches of
        // `mem_timing.cu`'s 2 ms saxpy by these events was 3.7% and 5.3% over that of the
        // five the program times (two runs on the H200), the program leaving out its first
        // for that reason. A failure leaves the launch to load it.
        // SAFETY: the driver's function, with the function about to be launched.
        let _ = unsafe { load(f) };
    }
    // SAFETY: the driver's function, with an event of the current context and the launch's
    // stream.
    if unsafe { record(pair.start as Handle, stream) } != 0 {
        count(TimingCount::Failed);
        give_back(context, pair);
        return call();
    }
    let result = call();
    if result != 0 {
        give_back(context, pair);
        return result;
    }
    // SAFETY: as above.
    if unsafe { record(pair.end as Handle, stream) } != 0 {
        count(TimingCount::Failed);
        give_back(context, pair);
        return result;
    }
    let (site, tag) = crate::attribution::gpu_time::launch_keys();
    let launch = Launch { kernel: crate::defaults::kernel_id(f), site, tag };
    let mut pools = pools();
    if let Some(pool) = find(&mut pools, context as usize) {
        // The host call's end, for a span whose events are lost.
        let span = SPAN.try_with(Cell::take).ok().flatten().map(|mut r| {
            r.result = result as u64;
            r.end_ns = crate::attribution::spans::now_ns();
            Box::new(r)
        });
        pool.pending.push_back((pair, launch, span));
    }
    drop(pools);
    start_harvester();
    result
}

/// The pool of `context` in this process.
fn find(pools: &mut [Pool], context: usize) -> Option<&mut Pool> {
    let pid = std::process::id();
    pools.iter_mut().find(|p| p.pid == pid && p.context == context)
}

/// A free pair of `context` (made when there are fewer than [`capacity`]), and whether this is
/// the first launch of `f` there; `None`, counted, when there is none.
fn take(context: Handle, f: Handle) -> Option<(Pair, bool)> {
    let mut first = false;
    for attempt in 0..2 {
        let mut all = pools();
        if find(&mut all, context as usize).is_none() {
            all.push(Pool {
                pid: std::process::id(),
                context: context as usize,
                device: context_device(),
                free: Vec::new(),
                made: 0,
                pending: VecDeque::new(),
                launched: std::collections::HashSet::new(),
                anchor: if crate::attribution::spans::on() { anchor() } else { None },
            });
        }
        let pool = find(&mut all, context as usize)?;
        first |= pool.launched.insert(f as usize);
        if let Some(pair) = pool.free.pop() {
            return Some((pair, first));
        }
        if pool.made < capacity() {
            let pair = make_pair();
            pool.made += usize::from(pair.is_some());
            return pair.map(|p| (p, first));
        }
        drop(all);
        if attempt == 0 {
            // Every pair in flight: those finished come back, without waiting for the GPU. A
            // harvest under way (egpu's thread's) holds them out of the pool: this one waits
            // its turn rather than leaving (in CI the harvester, woken by a synchronisation,
            // held the only pair while the program's last launches found the pool full).
            harvest(|p| p.context == context as usize, Harvest::Queue);
        }
    }
    count(TimingCount::PoolFull);
    None
}

/// The current context's device (from the cache of contexts' devices), -1 when the driver does
/// not say.
fn context_device() -> c_int {
    crate::events::devices::current().map_or(-1, |d| d as c_int)
}

/// Two events in the current context (default flags: they time); `None`, counted, when the
/// driver makes none.
fn make_pair() -> Option<Pair> {
    let Some(create) = CREATE.get_or_ask() else {
        count(TimingCount::Failed);
        return None;
    };
    let mut events: [Handle; 2] = [std::ptr::null_mut(); 2];
    for i in 0..2 {
        // SAFETY: the driver writes one event.
        if unsafe { create(&mut events[i], 0) } != 0 {
            count(TimingCount::Failed);
            destroy(&events[..i]);
            return None;
        }
    }
    Some(Pair { start: events[0] as usize, end: events[1] as usize })
}

/// Destroys events (those the driver still knows).
fn destroy(events: &[Handle]) {
    let Some(destroy) = DESTROY.get_or_ask() else { return };
    for &e in events.iter().filter(|e| !e.is_null()) {
        // SAFETY: an event this module made.
        let _ = unsafe { destroy(e) };
    }
}

/// A pair back to its pool, untimed.
fn give_back(context: Handle, pair: Pair) {
    if let Some(pool) = find(&mut pools(), context as usize) {
        pool.free.push(pair);
    }
}

/// Starts the harvester thread, once per process image.
fn start_harvester() {
    HARVESTER.get_or_init(|| {
        let period = crate::device::period();
        let spawned = std::thread::Builder::new().name("egpu-times".into()).spawn(move || {
            while !STOPPED.load(Ordering::Relaxed) {
                std::thread::park_timeout(period);
                if !capturing() {
                    harvest(|_| true, Harvest::Try);
                }
            }
        });
        match spawned {
            Ok(handle) => handle.thread().clone(),
            Err(_) => std::thread::current(),
        }
    });
}

/// Whether a stream capture is under way in the process.
fn capturing() -> bool {
    crate::defaults::HOT.captures.load(Ordering::Relaxed) > 0
}

/// After one of the program's synchronisations: wakes the harvester.
#[inline]
pub(crate) fn synced() {
    if enabled() {
        wake();
    }
}

#[cold]
#[inline(never)]
fn wake() {
    if let Some(harvester) = HARVESTER.get()
        && harvester.id() != std::thread::current().id()
    {
        harvester.unpark();
    }
}

/// Before a teardown: the pairs of the contexts it takes are waited for and harvested, then
/// destroyed (a context made later gets pairs of its own).
pub(crate) fn teardown(what: Teardown) {
    if !enabled() {
        return;
    }
    let covers = move |p: &Pool| what.takes(p.context, p.device);
    harvest(covers, Harvest::Wait);
    let pid = std::process::id();
    let mut gone = Vec::new();
    pools().retain_mut(|p| {
        let keep = p.pid != pid || !covers(p);
        if !keep {
            COUNTS[TimingCount::Lost as usize].fetch_add(p.pending.len() as u64, Ordering::Relaxed);
            let pending = p.pending.drain(..).map(|(pair, _, span)| {
                span.inspect(|r| crate::attribution::spans::write(r));
                pair
            });
            for pair in p.free.drain(..).chain(pending) {
                gone.extend([pair.start as Handle, pair.end as Handle]);
            }
        }
        keep
    });
    destroy(&gone);
}

/// At exit: the harvester stops, the pairs in flight are waited for and harvested.
pub(crate) fn finish() {
    STOPPED.store(true, Ordering::Relaxed);
    if enabled() {
        harvest(|_| true, Harvest::Wait);
    }
}

/// How a harvest goes about it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Harvest {
    /// Leaves when another harvest is under way; takes the pairs finished.
    Try,
    /// Waits for another harvest under way; takes the pairs finished.
    Queue,
    /// Waits for another harvest under way, then for every pair in flight.
    Wait,
}

/// Harvests the pairs of the pools `which` picks (of this process) whose launches finished, or
/// (`Harvest::Wait`) all of them, waiting; adds their times and the counts to the built-in maps.
/// One harvest at a time.
fn harvest(which: impl Fn(&Pool) -> bool, how: Harvest) {
    let _one = if how == Harvest::Try {
        match HARVESTING.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    } else {
        HARVESTING.lock().unwrap_or_else(|p| p.into_inner())
    };
    let wait = how == Harvest::Wait;
    let pid = std::process::id();
    // The pairs in flight taken out, so that launches go on meanwhile.
    let batches: Vec<(usize, VecDeque<Pending>)> = pools()
        .iter_mut()
        .filter(|p| p.pid == pid && which(p) && !p.pending.is_empty())
        .map(|p| (p.context, std::mem::take(&mut p.pending)))
        .collect();
    let mut times = Vec::new();
    for (context, batch) in batches {
        let (done, left, broken) = settle(context, batch, wait, &mut times);
        let mut all = pools();
        if let Some(pool) = find(&mut all, context) {
            pool.free.extend(done);
            pool.made = pool.made.saturating_sub(broken);
            // Those still in flight first: launched before the ones pushed meanwhile.
            let newer = std::mem::replace(&mut pool.pending, left);
            pool.pending.extend(newer);
        }
    }
    publish(&times);
}

/// Queries (or, `wait`, waits for) each pair of `batch`, in `context`: the times of those
/// finished go to `times`; returns the pairs to reuse, those still in flight, and how many
/// were destroyed (the driver refused them).
fn settle(
    context: usize,
    batch: VecDeque<Pending>,
    wait: bool,
    times: &mut Vec<(Launch, u64)>,
) -> (Vec<Pair>, VecDeque<Pending>, usize) {
    let (mut done, mut left, mut broken) = (Vec::new(), VecDeque::new(), 0);
    let hooks = (EVENT_QUERY.get_or_ask(), EVENT_SYNC.get_or_ask(), ELAPSED.get_or_ask());
    let (Some(query), Some(synchronize), Some(elapsed)) = hooks else {
        COUNTS[TimingCount::Failed as usize].fetch_add(batch.len() as u64, Ordering::Relaxed);
        return (batch.into_iter().map(|(p, _, _)| p).collect(), left, 0);
    };
    let pushed = push_context(context);
    let anchor = find(&mut pools(), context).and_then(|p| p.anchor);
    for (pair, launch, span) in batch {
        let (start, end) = (pair.start as Handle, pair.end as Handle);
        // SAFETY: the driver's functions, with events this module made and recorded.
        let mut state = unsafe { query(end) };
        if state == NOT_READY && wait {
            // SAFETY: as above.
            state = unsafe { synchronize(end) };
        }
        match state {
            0 => {
                let mut ms: c_float = 0.0;
                // SAFETY: as above; the driver writes one float.
                if unsafe { elapsed(&mut ms, start, end) } == 0 && ms >= 0.0 {
                    times.push((launch, (f64::from(ms) * 1e6).round() as u64));
                } else {
                    count(TimingCount::Failed);
                }
                if let Some(mut record) = span {
                    gpu_times(&mut record, anchor, pair, elapsed);
                    crate::attribution::spans::write(&record);
                }
                done.push(pair);
            }
            NOT_READY => left.push_back((pair, launch, span)),
            _ => {
                span.inspect(|r| crate::attribution::spans::write(r));
                // The context went, or the driver did: the launch's time is lost.
                count(if wait { TimingCount::Lost } else { TimingCount::Failed });
                destroy(&[start, end]);
                broken += 1;
            }
        }
    }
    if pushed {
        pop_context();
    }
    (done, left, broken)
}

/// Offers `record`, the span of the launch this thread is about to make, to the pair that times
/// it (taken in [`time_launch`] as the pair is published); false when launches are not timed.
pub(crate) fn offer_span(record: SpanRecord) -> bool {
    enabled() && SPAN.try_with(|s| s.set(Some(record))).is_ok()
}

/// Whether the launch just made took the span [`offer_span`] offered (it is written at its
/// pair's harvest); the offer is withdrawn either way.
pub(crate) fn span_taken() -> bool {
    SPAN.try_with(|s| s.take().is_none()).unwrap_or(false)
}

/// An event of the current context recorded on a stream of egpu's own, with nothing else on it,
/// and waited for: its completion on `CLOCK_REALTIME` (the middle of the record and the wait,
/// microseconds apart on an idle GPU), the anchor that maps the GPU's event times to wall time.
fn anchor() -> Option<(usize, u64)> {
    let (create, record) = (CREATE.get_or_ask()?, RECORD.get_or_ask()?);
    let (stream_create, synchronize) = (STREAM_CREATE.get_or_ask()?, EVENT_SYNC.get_or_ask()?);
    let (mut event, mut stream): (Handle, Handle) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the driver's functions, each writing one handle; `CU_STREAM_NON_BLOCKING`.
    if unsafe { create(&mut event, 0) != 0 || stream_create(&mut stream, 1) != 0 } {
        return None;
    }
    let before = crate::attribution::spans::now_ns();
    // SAFETY: the event and stream just made.
    if unsafe { record(event, stream) != 0 || synchronize(event) != 0 } {
        return None;
    }
    let after = crate::attribution::spans::now_ns();
    Some((event as usize, before + (after.saturating_sub(before)) / 2))
}

/// `record`'s start and end from `pair`'s events, mapped to wall time by `anchor`; its host
/// call's times kept when there is no anchor or the driver does not say.
fn gpu_times(
    record: &mut SpanRecord,
    anchor: Option<(usize, u64)>,
    pair: Pair,
    elapsed: ElapsedFn,
) {
    let Some((event, wall)) = anchor else { return };
    let since = |e: usize| {
        let mut ms: c_float = 0.0;
        // SAFETY: the driver's function, with events of one context, both complete.
        let ok = unsafe { elapsed(&mut ms, event as Handle, e as Handle) } == 0 && ms >= 0.0;
        ok.then(|| wall + (f64::from(ms) * 1e6).round() as u64)
    };
    if let (Some(start), Some(end)) = (since(pair.start), since(pair.end)) {
        (record.start_ns, record.end_ns, record.clock) = (start, end, CLOCK_GPU_EVENTS);
    }
}

/// Makes `context` current on this thread when it is not (egpu's thread has none); whether it
/// pushed it.
fn push_context(context: usize) -> bool {
    if crate::device::current_context().is_some_and(|c| c as usize == context) {
        return false;
    }
    let Some(push) = crate::device::CTX_PUSH.get_or_ask() else { return false };
    // SAFETY: the driver's function, with a context this process made current before.
    unsafe { push(context as Handle) == 0 }
}

fn pop_context() {
    if let Some(pop) = crate::device::CTX_POP.get_or_ask() {
        let mut popped: Handle = std::ptr::null_mut();
        // SAFETY: the driver writes one handle.
        let _ = unsafe { pop(&mut popped) };
    }
}

/// Adds the harvested times and the counts since the last harvest to the built-in maps.
fn publish(times: &[(Launch, u64)]) {
    let counts = COUNTS.each_ref().map(|c| c.swap(0, Ordering::Relaxed));
    if times.is_empty() && counts.iter().all(|&n| n == 0) {
        return;
    }
    let published = crate::defaults::with_builtin(|b| {
        for &(launch, ns) in times {
            b.record_kernel_time(launch.kernel, ns);
        }
        b.count_timing(TimingCount::Timed, times.len() as u64);
        let slots = [
            TimingCount::Timed,
            TimingCount::Captured,
            TimingCount::PoolFull,
            TimingCount::Failed,
            TimingCount::Lost,
        ];
        for (what, n) in slots.into_iter().zip(counts) {
            if n > 0 {
                b.count_timing(what, n);
            }
        }
    });
    crate::attribution::gpu_time::add(times.iter().map(|&(l, ns)| (l.site, l.tag, ns)));
    if published.is_none() {
        // No maps (yet): the counts wait for the next harvest.
        for (c, n) in COUNTS.iter().zip(counts) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }
}
