//! Launch spans for OpenTelemetry traces (`EGPU_TRACES=1`, which `egpu run --otlp` sets): a
//! kernel launch made while its thread has a W3C trace context set writes one
//! [`SpanRecord`] to the process's span ring in shared memory (`egpu::host::spans`): the trace
//! id and the thread's span as its parent, a new span id, the kernel, the launch's site and tag,
//! and the host call's entry and exit on `CLOCK_REALTIME` as its start and end, or, when the
//! kernel times' events timed the launch (`EGPU_KERNEL_TIMES`), the kernel's start and end on the
//! GPU mapped to `CLOCK_REALTIME` (`kernel_times`: the span is written when its events are
//! harvested). A full ring drops the record and counts it; nothing waits.
//!
//! Once a thread sets a trace context, every driver call takes the whole way (no trampoline
//! fast path, as with the kernel times), where launches are wrapped here.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use egpu::host::spans::{CLOCK_HOST_CALL, SpanRecord, SpanRing};

use crate::{CuResult, Handle};

/// Whether spans are recorded (`EGPU_TRACES` set, and not to `0` or empty).
static ON: AtomicBool = AtomicBool::new(false);
/// The process's ring (remade in a child of `fork`: its pid), `None` when it cannot be made.
static RING: Mutex<Option<(u32, Option<&'static SpanRing>)>> = Mutex::new(None);
/// Spans written, and dropped (a full ring, or none), for the summary.
static WRITTEN: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
/// The next span id's seed.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Reads `EGPU_TRACES` once, when the probes are set up, and makes the ring then, so that
/// `egpu run` finds it with the process's other maps.
pub(crate) fn configure() {
    let on = std::env::var_os("EGPU_TRACES").is_some_and(|v| !v.is_empty() && v != "0");
    ON.store(on, Ordering::Relaxed);
    if on {
        NEXT.store(now_ns() ^ u64::from(std::process::id()) << 40, Ordering::Relaxed);
        ring();
        // A thread that set its tags before the probes were set up may have a trace context.
        if crate::defaults::HOT.attribution.load(Ordering::Relaxed) & super::TAGS != 0 {
            crate::defaults::swap_launches();
        }
    }
}

/// Whether spans are recorded.
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// `call`, a launch of `f`, with its span recorded when spans are on and the thread has a trace
/// context.
#[inline(always)]
pub(crate) fn around(f: Handle, call: impl FnOnce() -> CuResult) -> CuResult {
    if !on() {
        return call();
    }
    traced(f, call)
}

#[cold]
#[inline(never)]
fn traced(f: Handle, call: impl FnOnce() -> CuResult) -> CuResult {
    let local = crate::local();
    let [tag_id, high, low, parent] = local.attr.tags.get();
    if high | low == 0 || local.attr.in_span.replace(true) {
        return call();
    }
    let start_ns = now_ns();
    let mut record = SpanRecord {
        trace_id: [high, low],
        parent_span_id: parent,
        span_id: span_id(),
        start_ns,
        end_ns: start_ns,
        kernel: crate::defaults::kernel_id(f),
        site_id: local.attr.call_site.get(),
        tag_id,
        clock: CLOCK_HOST_CALL,
        result: 0,
    };
    // Timed by the kernel times' events: the launch takes the span with its pair, which is
    // written at its harvest with the GPU's times (taken before the pair is published, so that
    // a harvest right after the launch cannot miss it).
    let offered = crate::kernel_times::offer_span(record);
    let result = call();
    let end_ns = now_ns();
    local.attr.in_span.set(false);
    local.attr.call_site.set(0);
    if offered && crate::kernel_times::span_taken() {
        return result;
    }
    record.end_ns = end_ns;
    record.result = result as u64;
    write(&record);
    result
}

/// Writes `record` to the process's ring (dropped and counted when it is full).
pub(crate) fn write(record: &SpanRecord) {
    match ring() {
        Some(ring) if ring.output(record) => WRITTEN.fetch_add(1, Ordering::Relaxed),
        _ => DROPPED.fetch_add(1, Ordering::Relaxed),
    };
}

/// A new span id: a counter seeded by the time and pid, mixed (splitmix64); never 0.
fn span_id() -> u64 {
    let mut z = NEXT.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)).max(1)
}

/// Now on `CLOCK_REALTIME`, in nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes `t`.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut t) };
    (t.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(t.tv_nsec as u64)
}

/// The process's ring, made at the first call.
fn ring() -> Option<&'static SpanRing> {
    let pid = std::process::id();
    let mut ring = RING.lock().unwrap_or_else(|p| p.into_inner());
    match *ring {
        Some((p, r)) if p == pid => r,
        _ => {
            let shared = std::env::var_os("EGPU_SHARED").is_none_or(|v| v != "0");
            // Never dropped: a parent's, in a child, would remove the parent's objects.
            let made = SpanRing::create(pid, shared).ok().map(|r| &*Box::leak(Box::new(r)));
            *ring = Some((pid, made));
            made
        }
    }
}

/// The summary's line: spans written and dropped; nothing when spans are off.
pub(crate) fn summary() -> String {
    if !on() {
        return String::new();
    }
    format!(
        "spans written {} dropped {}\n",
        WRITTEN.load(Ordering::Relaxed),
        DROPPED.load(Ordering::Relaxed)
    )
}
