//! Deferred probes: events queued by the threads that see them, run by one worker thread.
//!
//! A call such as `cuLaunchKernel` leaves the processor's caches cold for whatever runs next:
//! measured on the H200 machine, running a counting probe synchronously after the driver call
//! cost 190–420 ns, against 46 ns with warm caches. Posting the event instead touches a few
//! cache lines (the thread's queue and one slot); the worker runs the probes with its caches
//! warm, in order for each thread.
//!
//! - Each posting thread has its own single-producer queue of [`SLOTS`] contexts, registered
//!   with the set. A full queue never drops an event and never blocks: the poster runs the
//!   probes itself.
//! - The worker sweeps every queue every [`SWEEP`]; [`HostProbes::flush`] runs what is queued
//!   now on the calling thread (at exit, before a summary, in tests). A queue whose thread is
//!   gone is let go once it is empty.
//! - After `fork`, the child starts without queues and without a worker; its first post makes
//!   them. The thread that forks holds every lock of the set across the fork (`fork_safe`), so
//!   the child never inherits one held by a thread it does not have.

use std::cell::{RefCell, UnsafeCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use egpu_ebpf::{AllocCtx, HostEvent, LaunchCtx, MemcpyCtx, ModuleLoadCtx, Phase, SyncCtx};

use super::{HostContext, HostProbes};

/// Contexts a thread's queue holds.
pub(super) const SLOTS: usize = 4096;
/// How often the worker looks at the queues.
pub(super) const SWEEP: Duration = Duration::from_micros(500);
/// The largest host context.
const CTX_MAX: usize = 128;

const _: () = {
    assert!(CTX_MAX <= FIRST + 64 && CTX_MAX < 256);
    let sizes = [
        size_of::<LaunchCtx>(),
        size_of::<MemcpyCtx>(),
        size_of::<AllocCtx>(),
        size_of::<SyncCtx>(),
        size_of::<ModuleLoadCtx>(),
    ];
    let mut i = 0;
    while i < sizes.len() {
        assert!(sizes[i] <= CTX_MAX);
        i += 1;
    }
};

/// A value on a cache line of its own.
#[repr(align(128))]
struct Line<T>(T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// One cache line of a queue, holding up to 64 bytes of an event's context; a longer context
/// continues in the next slot. The event, phase and length are kept apart, in a `u16` per slot
/// (32 of them to a line), so that a context of 64 bytes, such as a launch's up to its block
/// size, takes one line. Callers queue only the bytes the probes read
/// ([`HostProbes::context_needed`]).
#[repr(C, align(64))]
struct Slot([u8; 64]);

/// Context bytes in an event's first slot.
const FIRST: usize = 64;

/// An event's header: event code in bits 0–2, exit phase in bit 3, length in bits 8–15.
fn header(event: HostEvent, phase: Phase, len: usize) -> u16 {
    u16::from(event_code(event)) | u16::from(phase == Phase::Exit) << 3 | (len as u16) << 8
}

fn event_code(event: HostEvent) -> u8 {
    match event {
        HostEvent::Launch => 0,
        HostEvent::Memcpy => 1,
        HostEvent::Alloc => 2,
        HostEvent::Sync => 3,
        HostEvent::ModuleLoad => 4,
    }
}

fn event_of(code: u8) -> HostEvent {
    match code {
        0 => HostEvent::Launch,
        1 => HostEvent::Memcpy,
        2 => HostEvent::Alloc,
        3 => HostEvent::Sync,
        _ => HostEvent::ModuleLoad,
    }
}

/// One thread's queue: the thread ([`Producer`]) writes `head`, the consumer `tail`, each on a
/// cache line of its own.
pub(super) struct Queue {
    slots: Box<[UnsafeCell<Slot>]>,
    /// Each slot's [`header`].
    headers: Box<[UnsafeCell<u16>]>,
    head: Line<AtomicU64>,
    tail: Line<AtomicU64>,
    /// Held by whoever consumes (the worker, or a flush), so that one consumer runs at a time.
    consuming: AtomicBool,
}

// SAFETY: a slot is written by the queue's producer only while it is outside `tail..head` (not
// yet published), and read by the one consumer (`consuming`) only inside it, after the
// producer's release store of `head`; the consumer frees it by its release store of `tail`.
unsafe impl Sync for Queue {}
// SAFETY: as above; the queue owns its slots.
unsafe impl Send for Queue {}

impl Queue {
    fn new() -> Queue {
        let slots = (0..SLOTS).map(|_| UnsafeCell::new(Slot([0; 64]))).collect();
        let headers = (0..SLOTS).map(|_| UnsafeCell::new(0)).collect();
        Queue {
            slots,
            headers,
            head: Line(AtomicU64::new(0)),
            tail: Line(AtomicU64::new(0)),
            consuming: AtomicBool::new(false),
        }
    }

    fn slot(&self, at: u64) -> *mut Slot {
        self.slots[(at % SLOTS as u64) as usize].get()
    }

    fn header(&self, at: u64) -> *mut u16 {
        self.headers[(at % SLOTS as u64) as usize].get()
    }

    /// Whether every event posted has been consumed.
    fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Acquire)
    }

    /// Runs `run` on every queued context, in order, after any other consumer is done.
    fn drain(&self, mut run: impl FnMut(HostEvent, Phase, &mut [u8])) {
        while self.consuming.swap(true, Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let head = self.head.load(Ordering::Acquire);
        let mut t = self.tail.load(Ordering::Relaxed);
        let mut ctx = [0u8; CTX_MAX];
        while t < head {
            // SAFETY: the slots of `t`'s event are inside `tail..head`: published, and not
            // written again until the store of `tail` below frees them.
            let (event, phase, len) = unsafe {
                let h = *self.header(t);
                let len = usize::from(h >> 8).min(CTX_MAX);
                let first = len.min(FIRST);
                ctx[..first].copy_from_slice(&(&(*self.slot(t)).0)[..first]);
                if len > FIRST {
                    ctx[FIRST..len].copy_from_slice(&(&(*self.slot(t + 1)).0)[..len - FIRST]);
                }
                let phase = if h & 8 != 0 { Phase::Exit } else { Phase::Enter };
                (event_of((h & 7) as u8), phase, len)
            };
            t += if len > FIRST { 2 } else { 1 };
            run(event, phase, &mut ctx[..len]);
        }
        self.tail.store(head, Ordering::Release);
        self.consuming.store(false, Ordering::Release);
    }
}

/// The thread that posts to a queue: what it needs to queue an event, in one place of its own
/// (a thread-local's line, for a [`Poster`]), so that posting right after a call that left the
/// caches cold waits on as few lines as possible: it reads only this, and writes the slot, its
/// header and `head`. It reads the consumer's `tail` only when the queue looks full.
struct Producer {
    queue: Arc<Queue>,
    slots: *mut Slot,
    headers: *mut u16,
    /// The next slot to write (what `queue.head` says once published).
    head: std::cell::Cell<u64>,
    /// The last `tail` read.
    seen_tail: std::cell::Cell<u64>,
}

impl Producer {
    fn new(queue: Arc<Queue>) -> Producer {
        // The slices' cells, as raw pointers: `UnsafeCell<T>` has `T`'s layout.
        let slots = UnsafeCell::raw_get(queue.slots.as_ptr());
        let headers = UnsafeCell::raw_get(queue.headers.as_ptr());
        Producer {
            slots,
            headers,
            head: std::cell::Cell::new(queue.head.load(Ordering::Relaxed)),
            seen_tail: std::cell::Cell::new(queue.tail.load(Ordering::Relaxed)),
            queue,
        }
    }

    /// Whether the queue has room up to `end`, reading the consumer's `tail` (the last one read
    /// said no).
    #[cold]
    #[inline(never)]
    fn room(&self, end: u64) -> bool {
        let tail = self.queue.tail.load(Ordering::Acquire);
        self.seen_tail.set(tail);
        end - tail <= SLOTS as u64
    }

    /// Queues a context; false when the queue is full. Called by the queue's thread only.
    #[inline(always)]
    fn push(&self, event: HostEvent, phase: Phase, ctx: &[u8]) -> bool {
        if ctx.len() > CTX_MAX {
            return false;
        }
        let n = if ctx.len() <= FIRST { 1 } else { 2 };
        let head = self.head.get();
        if head + n - self.seen_tail.get() > SLOTS as u64 && !self.room(head + n) {
            return false;
        }
        let (first, rest) = ctx.split_at(ctx.len().min(FIRST));
        let at = |h: u64| (h % SLOTS as u64) as usize;
        // SAFETY: slots `head` and `head + 1` are outside `tail..head`: the consumer does not read
        // them until the store of `head` below publishes them, and this thread is the only
        // producer; the pointers are the queue's slices, which `self.queue` keeps alive, and the
        // indices are below their length.
        unsafe {
            *self.headers.add(at(head)) = header(event, phase, ctx.len());
            let slot = &mut (*self.slots.add(at(head))).0;
            match <&[u8; FIRST]>::try_from(first) {
                // A whole line (a launch's context up to its block size): copied inline, without
                // a call to `memcpy` whose code and table entry the driver's call left cold, and
                // without a branch taken (a cold predictor takes none).
                Ok(whole) => *slot = *whole,
                Err(_) => copy_rest(slot, first),
            }
            if !rest.is_empty() {
                copy_rest(&mut (*self.slots.add(at(head + 1))).0, rest);
            }
        }
        self.publish(head + n);
        true
    }

    /// Queues the first `len` bytes of `ctx` (at most a line's) in one slot, if there is room
    /// without reading the consumer's `tail`: [`push`](Self::push) for a context known to fit,
    /// without its cases.
    #[inline(always)]
    fn push_line<C: HostContext>(&self, phase: Phase, ctx: impl FnOnce() -> C, len: usize) -> bool {
        let head = self.head.get();
        if len > FIRST || head + 1 - self.seen_tail.get() > SLOTS as u64 {
            return refused();
        }
        let ctx = &ctx();
        let at = (head % SLOTS as u64) as usize;
        // SAFETY: as in `push`: slot `head` is not published yet, and its index is in bounds;
        // at most `size_of::<C>()` bytes of `ctx` are read, and at most a slot's written.
        unsafe {
            *self.headers.add(at) = header(C::EVENT, phase, len);
            let slot = self.slots.add(at).cast::<u8>();
            let ctx = (ctx as *const C).cast::<u8>();
            // A constant size: copied inline. Bytes past `len` go along, unread.
            std::ptr::copy_nonoverlapping(ctx, slot, size_of::<C>().min(FIRST));
        }
        self.publish(head + 1);
        true
    }

    /// Publishes the events before `head` to the consumer.
    #[inline(always)]
    fn publish(&self, head: u64) {
        self.head.set(head);
        self.queue.head.store(head, Ordering::Release);
        // The next event's slot and header, fetched for writing now: the consumer read them
        // last, so writing them later, right before the next driver call, would wait on another
        // core; by then these loads are long done.
        let at = (head % SLOTS as u64) as usize;
        // SAFETY: indices below the slices' lengths.
        unsafe {
            prefetch_for_write(self.slots.add(at).cast());
            prefetch_for_write(self.headers.add(at).cast());
        }
    }
}

/// `false`, out of line: the branch that returns it is the rare one, laid out of the way (a
/// cold branch predictor takes none).
#[cold]
#[inline(never)]
fn refused() -> bool {
    false
}

/// Asks the processor to bring the line at `p` into this core's cache, owned for writing; a
/// hint, with no effect on what the program computes.
#[inline(always)]
fn prefetch_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetchw` reads nothing the program sees and never faults.
    unsafe {
        std::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above, `prfm` is a hint.
    unsafe {
        std::arch::asm!("prfm pstl1keep, [{}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = p;
}

/// Copies a context's bytes that are not one whole slot (out of line: see [`Producer::push`]).
#[cold]
#[inline(never)]
fn copy_rest(slot: &mut [u8; 64], bytes: &[u8]) {
    slot[..bytes.len()].copy_from_slice(bytes);
}

/// Forks seen by this process's children (a child's first post starts afresh).
static FORKS: AtomicU32 = AtomicU32::new(0);
/// The sets whose registries are locked across a fork.
static LOCKED_FOR_FORK: std::sync::Mutex<Vec<&'static HostProbes>> =
    std::sync::Mutex::new(Vec::new());

/// A set's queues and worker.
pub(super) struct Registry {
    /// A spin lock (held across `fork`, see the module documentation).
    lock: AtomicBool,
    queues: UnsafeCell<Vec<Arc<Queue>>>,
    /// The fork count the queues and the worker belong to; `u32::MAX`: none yet.
    epoch: AtomicU32,
}

// SAFETY: `queues` is only touched with `lock` held.
unsafe impl Sync for Registry {}
// SAFETY: as above.
unsafe impl Send for Registry {}

impl Registry {
    pub(super) const fn new() -> Registry {
        Registry {
            lock: AtomicBool::new(false),
            queues: UnsafeCell::new(Vec::new()),
            epoch: AtomicU32::new(u32::MAX),
        }
    }

    fn lock(&self) {
        while self.lock.swap(true, Ordering::Acquire) {
            std::hint::spin_loop();
        }
    }

    fn unlock(&self) {
        self.lock.store(false, Ordering::Release);
    }

    /// The queues, copied out under the lock.
    fn queues(&self) -> Vec<Arc<Queue>> {
        self.lock();
        // SAFETY: the lock is held.
        let queues = unsafe { (*self.queues.get()).clone() };
        self.unlock();
        queues
    }

    /// Lets go of the queues of threads that are gone (nothing but the registry holds them: no
    /// producer will post again) once they are empty, so that a program that starts threads
    /// without end does not keep a queue for each.
    fn retire(&self) {
        self.lock();
        // SAFETY: the lock is held.
        let queues = unsafe { &mut *self.queues.get() };
        // Nothing allocated when none is gone, as at most sweeps.
        let gone: Vec<Arc<Queue>> =
            queues.extract_if(.., |q| Arc::strong_count(q) == 1 && q.is_empty()).collect();
        self.unlock();
        // Freed outside the lock.
        drop(gone);
    }

    /// How many queues there are.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.queues().len()
    }
}

thread_local! {
    /// The locks `before_fork` took, held across `fork` by the thread that forks and released
    /// by `after_fork_*` in the parent and in the child.
    static FORK_GUARDS: RefCell<Vec<Box<dyn std::any::Any>>> = const { RefCell::new(Vec::new()) };
}

/// Registers the fork handlers (once) and `set` with them: across a `fork`, the thread that forks
/// holds every lock of the set, so the child never inherits one held by a thread it does not
/// have (the worker thread reading the attached probes, say).
pub(super) fn fork_safe(set: &'static HostProbes) {
    static HANDLERS: std::sync::Once = std::sync::Once::new();
    HANDLERS.call_once(|| {
        // SAFETY: the handlers are `extern "C"` functions that live as long as the process.
        unsafe {
            libc::pthread_atfork(Some(before_fork), Some(after_fork_parent), Some(after_fork_child))
        };
    });
    if let Ok(mut sets) = LOCKED_FOR_FORK.lock()
        && !sets.iter().any(|s| std::ptr::eq(*s, set))
    {
        sets.push(set);
    }
}

extern "C" fn before_fork() {
    let mut guards: Vec<Box<dyn std::any::Any>> = Vec::new();
    let Ok(sets) = LOCKED_FOR_FORK.lock() else { return };
    let list: Vec<&'static HostProbes> = sets.clone();
    guards.push(Box::new(sets));
    for set in &list {
        // In the order every other path takes them: the attached probes before either, and the
        // health mirror before the run counters (`write_health_mirror`, on the worker thread,
        // holds the one while it reads the other).
        guards.push(Box::new(set.attached.write().unwrap_or_else(|p| p.into_inner())));
        guards.push(Box::new(set.health_mirror.lock().unwrap_or_else(|p| p.into_inner())));
        guards.push(Box::new(set.runs.lock().unwrap_or_else(|p| p.into_inner())));
        set.registry.lock();
    }
    guards.push(Box::new(list));
    let _ = FORK_GUARDS.try_with(|g| *g.borrow_mut() = guards);
}

fn after_fork(child: bool) {
    let Ok(mut guards) = FORK_GUARDS.try_with(|g| std::mem::take(&mut *g.borrow_mut())) else {
        return;
    };
    if let Some(list) = guards.pop().and_then(|l| l.downcast::<Vec<&'static HostProbes>>().ok()) {
        for set in list.iter() {
            if child {
                set.hot.forks.fetch_add(1, Ordering::Relaxed);
            }
            set.registry.unlock();
        }
    }
    // The std locks, in the reverse order of their taking.
    while let Some(guard) = guards.pop() {
        drop(guard);
    }
}

extern "C" fn after_fork_parent() {
    after_fork(false);
}

extern "C" fn after_fork_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    after_fork(true);
}

thread_local! {
    /// This thread's queue per set: (set serial, fork count, queue).
    static MINE: RefCell<Vec<(u64, u32, Producer)>> = const { RefCell::new(Vec::new()) };
}

impl HostProbes {
    /// Queues the event for the set's worker thread, which runs the probes attached to `C`'s
    /// event at `phase` with a copy of `ctx` (so what they write to it is not seen here),
    /// shortly, in order with this thread's other events. Costs the caller a few cache lines
    /// where [`fire`](HostProbes::fire) costs it the probes' runs. When the thread's queue is
    /// full, the probes run now, here; so do they when one of them waits
    /// ([`waits`](HostProbes::waits)), so that the call waits with it (before this thread's
    /// events still queued).
    #[inline]
    pub fn post<C: HostContext>(&'static self, phase: Phase, ctx: &C) {
        if self.armed(C::EVENT, phase) {
            if self.waits(C::EVENT, phase) {
                self.fire_copy(C::EVENT, phase, bytemuck::bytes_of(ctx));
            } else {
                self.post_slow(C::EVENT, phase, bytemuck::bytes_of(ctx));
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn post_slow(&'static self, event: HostEvent, phase: Phase, ctx: &[u8]) {
        let ctx = &ctx[..self.context_needed(event, phase).min(ctx.len())];
        let forks = FORKS.load(Ordering::Relaxed);
        let queued = MINE.try_with(|cell| {
            let Ok(mut mine) = cell.try_borrow_mut() else { return false };
            let at = match mine.iter().position(|(s, f, _)| *s == self.serial && *f == forks) {
                Some(at) => at,
                None => {
                    mine.retain(|(s, _, _)| *s != self.serial);
                    let queue = Arc::new(Queue::new());
                    self.register(queue.clone(), forks);
                    mine.push((self.serial, forks, Producer::new(queue)));
                    mine.len() - 1
                }
            };
            mine[at].2.push(event, phase, ctx)
        });
        if queued != Ok(true) {
            self.fire_copy(event, phase, ctx);
        }
    }

    /// Runs the probes now, on a copy of `ctx` (a queue was full, or cannot be had).
    #[cold]
    #[inline(never)]
    fn fire_copy(&self, event: HostEvent, phase: Phase, ctx: &[u8]) {
        let mut copy = [0u8; CTX_MAX];
        let len = ctx.len().min(CTX_MAX);
        copy[..len].copy_from_slice(&ctx[..len]);
        self.fire_slow(event, phase, &mut copy[..len]);
    }

    /// Adds a thread's queue, starting the worker (and, once, the fork handlers) when this
    /// process has none yet.
    fn register(&'static self, queue: Arc<Queue>, forks: u32) {
        fork_safe(self);
        let registry = &self.registry;
        registry.lock();
        let fresh = registry.epoch.load(Ordering::Relaxed) != forks;
        // SAFETY: the lock is held.
        let queues = unsafe { &mut *registry.queues.get() };
        if fresh {
            // A new process (or the first queue): the parent's queues are its own business.
            queues.clear();
            registry.epoch.store(forks, Ordering::Relaxed);
        }
        queues.push(queue);
        registry.unlock();
        if fresh {
            let set = self;
            // Without a worker (the thread cannot be made), the queues are drained by flushes
            // and by posters whose queue is full, which run the probes themselves.
            let _ = std::thread::Builder::new()
                .name("egpu-probes".into())
                .spawn(move || set.work(forks));
        }
    }

    /// The worker: sweeps the queues until the process forks (its child gets its own).
    fn work(&'static self, forks: u32) {
        while FORKS.load(Ordering::Relaxed) == forks {
            self.flush();
            std::thread::sleep(SWEEP);
        }
    }

    /// Runs every queued event's probes now, on the calling thread; when it returns, every
    /// event posted before it was called has run.
    pub fn flush(&self) {
        for queue in self.registry.queues() {
            queue.drain(|event, phase, ctx| self.fire_slow(event, phase, ctx));
        }
        self.registry.retire();
        self.write_health_mirror();
    }
}

/// A thread's handle for posting to one set without finding its queue each time: a caller that
/// posts often keeps one in a thread-local of its own (`egpu-preload` does). It belongs to the
/// thread that made it (`!Send`); after a `fork`, it posts through [`HostProbes::post`], which
/// makes the child's queue.
pub struct Poster {
    set: &'static HostProbes,
    producer: Producer,
    forks: u32,
    _thread: std::marker::PhantomData<*const ()>,
}

impl std::fmt::Debug for Poster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poster").field("forks", &self.forks).finish_non_exhaustive()
    }
}

impl HostProbes {
    /// A poster for the calling thread (see [`Poster`]).
    pub fn poster(&'static self) -> Poster {
        let queue = Arc::new(Queue::new());
        self.register(queue.clone(), FORKS.load(Ordering::Relaxed));
        Poster {
            set: self,
            producer: Producer::new(queue),
            forks: self.hot.forks.load(Ordering::Relaxed),
            _thread: std::marker::PhantomData,
        }
    }
}

impl Poster {
    /// As [`HostProbes::post`], through this thread's own queue, with only the context bytes
    /// the probes read ([`HostProbes::context_needed`]) queued.
    #[inline(always)]
    pub fn post<C: HostContext>(&self, phase: Phase, ctx: &C) {
        let state = self.set.state(C::EVENT, phase);
        if state >> 32 == 0 {
            return;
        }
        let needed = ((state >> 16 & 0xffff) as usize).min(size_of::<C>());
        let bytes = &bytemuck::bytes_of(ctx)[..needed];
        if state >> 63 != 0 {
            // A probe that waits runs here: the call waits with it.
            self.set.fire_copy(C::EVENT, phase, bytes);
        } else if self.stale() {
            self.set.post_slow(C::EVENT, phase, bytes);
        } else if !self.producer.push(C::EVENT, phase, bytes) {
            self.set.fire_copy(C::EVENT, phase, bytes);
        }
    }

    /// [`post`](Self::post) when it is all a line: the probes at `phase` read at most 64
    /// bytes of the context, none of them waits ([`HostProbes::waits`]), the process has not
    /// forked since this poster was made, and the queue has room without asking the worker.
    /// Then `ctx` makes the context, which is queued, and this returns `true`; otherwise
    /// nothing was made or posted, and [`post`](Self::post) does what is left. For a caller
    /// whose common case must be short (a driver call's, right after the last one left the
    /// caches cold).
    #[inline(always)]
    pub fn post_line<C: HostContext>(&self, phase: Phase, ctx: impl FnOnce() -> C) -> bool {
        let state = self.set.state(C::EVENT, phase);
        let needed = ((state >> 16 & 0xffff) as usize).min(size_of::<C>());
        state >> 63 == 0 && !self.stale() && self.producer.push_line(phase, ctx, needed)
    }

    /// Whether the process forked since this poster was made (a child then makes a new one).
    #[inline]
    pub fn stale(&self) -> bool {
        self.set.hot.forks.load(Ordering::Relaxed) != self.forks
    }
}
