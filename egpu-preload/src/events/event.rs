//! One event per call ([`observe`]): the context a call makes, posted to the probes at its entry
//! before the driver's function runs and to those at its exit after, where anything is attached.

use std::mem::offset_of;

use egpu::ebpf::{AllocCtx, LaunchCtx, MemcpyCtx, ModuleLoadCtx, Phase, SyncCtx};
use egpu::host::{HostContext, HostProbes};

use crate::{CuResult, defaults};

/// A context that says where its call comes from (`site_id`) and what it belongs to (`tag_id`,
/// `trace_id`, `span_id`): launches, copies, allocations ([`crate::attribution`]).
pub(crate) trait Attributed {
    /// Whether it has those fields.
    const ATTRIBUTED: bool;
    /// Fills them: the site id and the tags (tag id, trace id high and low, span id).
    fn attribute(&mut self, site: u64, tags: [u64; 4]);
}

macro_rules! attributed {
    ($($t:ty),*) => {$(
        impl Attributed for $t {
            const ATTRIBUTED: bool = true;
            fn attribute(&mut self, site: u64, t: [u64; 4]) {
                (self.site_id, self.tag_id, self.trace_id, self.span_id) =
                    (site, t[0], [t[1], t[2]], t[3]);
            }
        }
    )*};
}
attributed!(LaunchCtx, MemcpyCtx, AllocCtx);

macro_rules! unattributed {
    ($($t:ty),*) => {$(
        impl Attributed for $t {
            const ATTRIBUTED: bool = false;
            fn attribute(&mut self, _: u64, _: [u64; 4]) {}
        }
    )*};
}
unattributed!(SyncCtx, ModuleLoadCtx);

/// A host event's context: where its common fields are.
pub(crate) trait Event: HostContext + Attributed {
    /// Whether a call of this kind may be one of the program's synchronisations with the GPU
    /// (a synchronisation, a copy): after it the maps' device parts are merged soon
    /// ([`crate::device::synced`]).
    const SYNC_POINT: bool;
    const TIMESTAMP: usize;
    const DURATION: usize;
    const TID: usize;
    /// Where its `device` field is ([`super::devices::fill`]).
    const DEVICE: usize;
    fn timestamp(&mut self) -> &mut u64;
    fn duration(&mut self) -> &mut u64;
    fn tid(&mut self) -> &mut u32;
    fn device(&mut self) -> &mut u32;
    fn result(&mut self) -> &mut i32;
}

macro_rules! event {
    ($($t:ty: $sync:expr),*) => {$(
        impl Event for $t {
            const SYNC_POINT: bool = $sync;
            const TIMESTAMP: usize = offset_of!($t, timestamp_ns);
            const DURATION: usize = offset_of!($t, duration_ns);
            const TID: usize = offset_of!($t, host_tid);
            const DEVICE: usize = offset_of!($t, device);
            fn timestamp(&mut self) -> &mut u64 { &mut self.timestamp_ns }
            fn duration(&mut self) -> &mut u64 { &mut self.duration_ns }
            fn tid(&mut self) -> &mut u32 { &mut self.host_tid }
            fn device(&mut self) -> &mut u32 { &mut self.device }
            fn result(&mut self) -> &mut i32 { &mut self.result }
        }
    )*};
}
event!(LaunchCtx: false, MemcpyCtx: true, AllocCtx: false, SyncCtx: true, ModuleLoadCtx: false);

/// Runs `call` as one event: the context `build` makes (given the context words the probes
/// read, [`egpu::host::HostProbes::context_words`]), posted before the call; `after` fills what
/// the call produced, and the context is posted again after it. When nothing is attached to the
/// event, or the thread is already inside an interposed call, `call` is all that runs.
///
/// Laid out for a launch right after another: the driver's call leaves the branch predictor
/// cold as well as the caches, and a cold predictor takes each branch as not taken. So in the
/// common case (probes at the entry only, reading neither clock nor thread id) no branch here
/// is taken; the rest is out of line.
///
/// Inlined into the entry points that call it (the runtime's, module loads), which live in other
/// modules and so other codegen units; the trampolines' fallback calls [`observe_apart`].
#[inline]
pub(crate) fn observe<C: Event>(
    build: impl FnOnce(u16, &crate::Local) -> C,
    call: impl FnOnce() -> CuResult,
    after: impl FnOnce(&mut C, CuResult),
) -> CuResult {
    let result = observe_call(build, call, after);
    if C::SYNC_POINT {
        crate::device::synced();
    }
    result
}

/// [`observe`]'s event, without the merger's wake after a synchronisation.
#[inline(always)]
fn observe_call<C: Event>(
    build: impl FnOnce(u16, &crate::Local) -> C,
    call: impl FnOnce() -> CuResult,
    after: impl FnOnce(&mut C, CuResult),
) -> CuResult {
    // Nothing attached, paused, or a call the driver makes inside another interposed call:
    // straight to the driver, before touching any thread-local where it can be.
    let Some(probes) = defaults::active() else { return call() };
    let (enter, exit) = (probes.armed(C::EVENT, Phase::Enter), probes.armed(C::EVENT, Phase::Exit));
    if !enter && !exit {
        rare();
        return call();
    }
    let local = crate::local();
    if local.inside.get() {
        rare();
        return call();
    }
    local.inside.set(true);
    let (ctx, timed) = begin(probes, local, enter, exit, build);
    let result = call();
    if exit {
        finish(probes, local, ctx, result, timed, after);
    }
    local.inside.set(false);
    result
}

/// [`observe`], out of line: what the trampolines' fallback (`full`) calls, rather than carry the
/// event's code itself.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[inline(never)]
pub(crate) fn observe_apart<C: Event>(
    build: impl FnOnce(u16, &crate::Local) -> C,
    call: impl FnOnce() -> CuResult,
    after: impl FnOnce(&mut C, CuResult),
) -> CuResult {
    observe(build, call, after)
}

/// The first half of an event, before the call (the thread is inside it): the context `build`
/// makes with the fields the probes at its entry and exit read, stamped, and posted to those at
/// its entry. Returns it, and whether it was timed.
#[inline(always)]
fn begin<C: Event>(
    probes: &'static HostProbes,
    local: &crate::Local,
    enter: bool,
    exit: bool,
    build: impl FnOnce(u16, &crate::Local) -> C,
) -> (C, bool) {
    // The fields the probes read, and no more: a clock read or a system call costs more than a
    // probe's run. (Nothing attached at a phase reads nothing.)
    let words =
        probes.context_words(C::EVENT, Phase::Enter) | probes.context_words(C::EVENT, Phase::Exit);
    let reads = |offset: usize| words & (1 << (offset / 8)) != 0;
    let mut ctx = build(words, local);
    crate::attribution::attribute(&mut ctx, local);
    super::devices::fill(&mut ctx, words);
    let timed = reads(C::TIMESTAMP) | (exit & reads(C::DURATION));
    if timed | reads(C::TID) {
        stamp(&mut ctx, timed, reads(C::TID));
    }
    if enter {
        local.post(probes, Phase::Enter, &ctx);
    }
    (ctx, timed)
}

/// Fills the context's timestamp (when `timed`) and thread id (when `tid`).
#[cold]
#[inline(never)]
fn stamp<C: Event>(ctx: &mut C, timed: bool, tid: bool) {
    if timed {
        *ctx.timestamp() = egpu::host::now_ns();
    }
    if tid {
        *ctx.tid() = egpu::host::thread_id();
    }
}

/// After the call, for probes at its exit: what the call produced, the time it took (when
/// `timed`) and its result, posted.
#[cold]
#[inline(never)]
fn finish<C: Event>(
    probes: &'static HostProbes,
    local: &crate::Local,
    mut ctx: C,
    result: CuResult,
    timed: bool,
    after: impl FnOnce(&mut C, CuResult),
) {
    after(&mut ctx, result);
    if timed {
        *ctx.duration() = egpu::host::now_ns().saturating_sub(*ctx.timestamp());
    }
    *ctx.result() = result;
    local.post(probes, Phase::Exit, &ctx);
}

/// Marks the branch that calls it as the rare one, so that the common path runs straight through
/// (see [`observe`]); `std::hint::cold_path` does this from Rust 1.95 on.
#[cold]
#[inline(never)]
pub(crate) fn rare() {
    // Opaque, so that the call is kept, and with it the hint.
    std::hint::black_box(());
}

/// What an event whose call produces nothing more adds after it: nothing.
pub(crate) fn nothing<C>(_: &mut C, _: CuResult) {}
