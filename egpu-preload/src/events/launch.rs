//! Launches of kernels and of graphs: their context ([`LaunchCtx`]), and the stream captures that
//! say whether a launch runs.

use std::ffi::{c_int, c_uint};
use std::sync::atomic::Ordering;

use egpu::ebpf::LaunchCtx;

use super::event::rare;
use crate::real::Hook;
use crate::{CuResult, Handle, defaults};

// Launches captured into graphs are not run when launched: `defaults::HOT.captures` counts the
// stream captures begun and not yet ended in this process. While there are none, a launch need
// not ask the driver whether its stream is capturing.

/// `cuStreamIsCapturing`'s signature.
type IsCapturingFn = unsafe extern "C" fn(Handle, *mut c_int) -> CuResult;
static IS_CAPTURING: Hook<IsCapturingFn> = Hook::new(c"cuStreamIsCapturing", std::ptr::null_mut);

/// [`LaunchCtx::CAPTURED`] when `stream` is capturing.
#[inline(always)]
pub(crate) fn captured(stream: Handle) -> u32 {
    if defaults::HOT.captures.load(Ordering::Relaxed) <= 0 { 0 } else { ask_captured(stream) }
}

#[cold]
#[inline(never)]
fn ask_captured(stream: Handle) -> u32 {
    /// `CU_STREAM_CAPTURE_STATUS_ACTIVE`.
    const ACTIVE: c_int = 1;
    let Some(is_capturing) = IS_CAPTURING.get_or_ask() else { return 0 };
    let mut status = 0;
    // SAFETY: the driver's function, writing one status.
    let asked = unsafe { is_capturing(stream, &mut status) };
    if asked == 0 && status == ACTIVE { LaunchCtx::CAPTURED } else { 0 }
}

/// Defines an entry point that begins (`begin`) or ends (`end`) a stream capture: counted in
/// `defaults::HOT.captures` ([`count_capture`]), no event; before a capture begins, the maps'
/// parts are made in the context ([`crate::device::before_capture`]).
macro_rules! capture {
    (begin) => { 1 };
    (end) => { -1 };
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $edge:ident) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            if capture!($edge) > 0 {
                crate::device::before_capture();
            }
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let result = unsafe { real($($arg),*) };
            count_capture(result, capture!($edge));
            result
        });
    };
}
pub(super) use capture;

/// Counts a stream capture begun (`delta` 1) or ended (-1) by a call that returned `result`.
pub(super) fn count_capture(result: CuResult, delta: i64) {
    // An end counts even when it fails (an invalidated capture ends too); the count is a hint,
    // the driver's answer in `captured` is what counts.
    if delta > 0 && result == 0 {
        // Graphs to be launched: launches that name no function (`functions`).
        super::functions::graphs();
    }
    if result == 0 || delta < 0 {
        let _ = defaults::HOT
            .captures
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some((n + delta).max(0)));
    }
}

/// `CUlaunchConfig`'s fields egpu reads.
#[repr(C)]
pub(crate) struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    stream: Handle,
}

/// The context of a launch of `f` (its kernel id only when the probes read it: `words` bit 0).
pub(crate) fn launch_ctx(
    words: u16,
    local: &crate::Local,
    f: Handle,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    stream: Handle,
) -> LaunchCtx {
    let mut ctx = LaunchCtx {
        function: f as u64,
        stream: stream as u64,
        grid,
        block,
        shared_mem_bytes,
        flags: captured(stream),
        ..LaunchCtx::default()
    };
    ctx.kernel_id = if words & 1 != 0 {
        kernel_id(local, f)
    } else {
        rare();
        0
    };
    ctx
}

/// The kernel id of `f`, remembered for the thread's last function (most loops launch one).
#[inline(always)]
fn kernel_id(local: &crate::Local, f: Handle) -> u64 {
    match local.last.get() {
        (last, id) if last == f as usize && last != 0 => id,
        _ => new_kernel_id(local, f),
    }
}

#[cold]
#[inline(never)]
fn new_kernel_id(local: &crate::Local, f: Handle) -> u64 {
    let id = defaults::kernel_id(f);
    local.last.set((f as usize, id));
    id
}

pub(super) fn launch_ex(
    words: u16,
    local: &crate::Local,
    config: *const LaunchConfig,
    f: Handle,
) -> LaunchCtx {
    if config.is_null() {
        return launch_ctx(words, local, f, [0; 3], [0; 3], 0, std::ptr::null_mut());
    }
    // SAFETY: the caller's launch configuration, which the driver reads too.
    let c = unsafe { &*config };
    launch_ctx(words, local, f, c.grid, c.block, c.shared_mem_bytes, c.stream)
}

/// The stream of a `cuLaunchKernelEx` launch (null without a configuration).
pub(super) fn config_stream(config: *const LaunchConfig) -> Handle {
    // SAFETY: the caller's launch configuration, which the driver reads too.
    unsafe { config.as_ref() }.map_or(std::ptr::null_mut(), |c| c.stream)
}

/// A graph launch: no one kernel, so the id is `u64::MAX`.
pub(super) fn graph(stream: Handle) -> LaunchCtx {
    super::functions::graphs();
    let (stream, flags) = (stream as u64, LaunchCtx::GRAPH);
    LaunchCtx { kernel_id: u64::MAX, stream, flags, ..LaunchCtx::default() }
}
