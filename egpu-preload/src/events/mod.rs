//! Every interposed entry point but the lookups: one event per call, built by [`observe`].
//!
//! One table lists them all, `entry_points!`'s invocation below. A row is an entry point: the
//! name of its [`Hook`] (for the driver's own function), its name and signature, the
//! per-thread-default-stream flavour it has, if any (`+ptsz` or `+ptds`: an entry point of its
//! own, with the same signature, named with that suffix), and its kind, which says what it does:
//!
//! - `driver(build, after)`: the driver's own, one event of each call, whose context `build`
//!   makes and `after` completes with what the call produced ([`observe`]); on x86-64 Linux
//!   entered through a trampoline ([`trampoline`]);
//! - `launch(build, f, stream)`: a kernel launch, as `driver` (with nothing after), whose call
//!   is timed by CUDA events on `stream` when the kernel times are on
//!   ([`crate::kernel_times`]);
//! - `runtime(build, after)`: the CUDA runtime's, which call the driver's: as `driver`, without
//!   the trampoline;
//! - `capture(begin)`, `capture(end)`: a stream capture begun or ended, counted, no event
//!   ([`launch`]);
//! - `kernel_node(p)`: a graph node made or changed from the parameters at `p`, no event; a
//!   kernel node whose function has egpu's launch parameter given the thread's tag
//!   ([`graphs`]);
//! - `load(out, image, library)`: a module (or, `true`, library) load, whose image the user's
//!   device probes instrument ([`modules`]); `load_fatbinary(out, image)`, the same for
//!   `cuModuleLoadFatBinary`, whose instrumented PTX goes to `cuModuleLoadData`;
//!   `load_file(out, path, library, image => LOADER(...))`, a module file's, read and its PTX
//!   loaded through the image loader `LOADER`;
//! - `library(...)`: lookups in libraries (`cuLibraryGetKernel`, `cuKernelGetFunction`,
//!   `cuLibraryGetModule`) and their unloads, for libraries whose instrumentation waits for a
//!   context ([`crate::device::libraries`]);
//! - `tensor_map(encoded(map, bytes))`, `tensor_map(replaced(map))`: no event, but the tensor map
//!   at `map` recorded with its box's bytes once the call made it (`bytes`, computed from the
//!   encoder's arguments), or with those recorded for it before the call changed its address
//!   ([`tensor_maps`]);
//! - `merge_point(what)`, `runtime_merge_point(what)` (the runtime's): no event, but the maps'
//!   device parts merged: before a teardown (`what`: a context destroyed, a primary context
//!   released or reset, [`crate::device::teardown`]), or soon after a call that may tell
//!   the program that the GPU's work is done (`None`: a module unloaded, a query).
//!
//! The contexts are built by [`launch`] (launches), [`memory`] (copies, sets, allocations and
//! frees) and [`modules`] (module loads); the tensor maps' boxes are read by [`tensor_maps`].
//! From the table come the exported functions (a flavour's in the module named after it:
//! `ptsz::cuLaunchKernel` is `cuLaunchKernel_ptsz`, its hook `ptsz::LAUNCH`), and [`ENTRIES`],
//! which lists them for `dlsym` (exact names) and `cuGetProcAddress` (base names, the flavour
//! chosen by its flags).

pub(crate) mod devices;
mod event;
pub(crate) mod functions;
mod graphs;
mod launch;
mod memory;
mod modules;
mod tensor_maps;
mod trampoline;

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use egpu::ebpf::{AllocCtx, MemcpyCtx, SyncCtx};

use crate::device::Teardown;
use crate::real::{Hook, Keep};
use crate::{CuResult, Handle};
pub(crate) use event::Attributed;
use event::{nothing, observe};
pub(crate) use graphs::form_at;
use graphs::{KernelNodeV1, KernelNodeV2, NodeParams, kernel_node};
pub(crate) use launch::captured;
use launch::{LaunchConfig, capture, config_stream, count_capture, graph, launch_ctx, launch_ex};
use memory::{Copy2dDriver, Copy3d, Copy3dDriver, Extent, HostPtr, PitchedPtr};
use memory::{MemLocation, advised, managed, prefetched};
use memory::{alloc, allocated, copied, copy, driver_copy_2d, driver_copy_3d, free, released};
use memory::{runtime_copy, runtime_copy_3d, runtime_set_3d, set};
use modules::{library, read_file};
use modules::{load, load_fatbinary, load_file, load_module, load_with};
use tensor_maps::{TensorMap, encoded, im2col, replaced, tiled};
use trampoline::{driver, swapped};
// What the trampolines' expansions use.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use crate::defaults;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use event::{observe_apart, rare};
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
use trampoline::{Saved, enter_only, trampolined};

/// `CUdeviceptr`.
type DevicePtr = u64;

/// `CUDA_ERROR_NOT_FOUND`: what a driver without the function amounts to.
const NOT_FOUND: CuResult = 500;

/// The null stream (`CUstream`, `cudaStream_t`): the default one. (Also the null context.)
const NULL: Handle = std::ptr::null_mut();

/// Whether the entry points defined here take the null stream as the thread's own (the
/// `_ptsz` flavours' modules say `true`).
const PER_THREAD: bool = false;

use MemcpyCtx as M;
const ASYNC: u32 = MemcpyCtx::ASYNC;

/// `with_nul`, a name and its NUL, as a C string.
const fn c_name(with_nul: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(with_nul.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("a name without NUL"),
    }
}

/// Defines the [`Hook`] named `$hook` for the real function of the entry point `$symbol` (this
/// library's: `$name`), whose signature takes `$ty`s.
macro_rules! hook {
    ($hook:ident $name:ident $symbol:expr; ($($ty:ty),*)) => {
        pub(crate) static $hook: Hook<unsafe extern "C" fn($($ty),*) -> CuResult> =
            Hook::new(c_name(concat!($symbol, "\0")), || $name as *mut c_void);
    };
}

/// Defines one interposed entry point: a [`Hook`] named `$hook` for the real function, and an
/// exported function named `$symbol` (in Rust, `$name`) with the entry point's signature, whose
/// body runs with `$real` bound to the real function.
macro_rules! interposed {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) |$real:ident| $body:block) => {
        hook!($hook $name $symbol; ($($ty),*));

        #[doc = concat!("The driver's `", $symbol, "`, interposed.")]
        ///
        /// # Safety
        ///
        /// As the driver's.
        #[unsafe(export_name = $symbol)]
        pub(crate) unsafe extern "C" fn $name($($arg: $ty),*) -> CuResult {
            let Some($real) = $hook.get() else { return NOT_FOUND };
            $body
        }
    };
}

/// Defines an interposed entry point that makes one event of each call ([`observe`]), whose
/// context `$build` makes and `$after` completes: the CUDA runtime's, which call the driver's
/// (and the driver's where there are no trampolines, [`driver`]).
macro_rules! runtime {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $build:expr, $after:expr) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let call = move || unsafe { real($($arg),*) };
            observe($build, call, $after)
        });
    };
}

/// Defines a kernel launch's entry point: as `driver!` makes it (nothing after the call), with
/// the call of the function `$f` on the stream `$stream` timed by CUDA events when the kernel
/// times are on ([`crate::kernel_times`]), and the launch's tag added to its argument lists
/// `$list` (`kernelParams`, and `extra` where it has one) when `$f` has the parameter
/// ([`crate::device::launch_tags`]).
macro_rules! launch {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $build:expr, $f:ident, $stream:expr; $($list:ident),+) => {
        driver!($hook $name $symbol; ($($arg: $ty),*) $build, nothing; timed($f, $stream);
            tagged($f; $($list),+));
    };
}

/// Defines `cuModuleUnload`: no event, but the functions' launch parameters forgotten
/// ([`crate::device::launch_tags::forget`]) and, after it, the merger woken.
macro_rules! unload_module {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            crate::device::launch_tags::forget();
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let result = unsafe { real($($arg),*) };
            if result == 0 {
                crate::device::synced();
            }
            result
        });
    };
}

/// Defines an interposed entry point that makes no event but where the maps' device parts are
/// merged: one that takes down what `$what` says ([`crate::device::Teardown`]), whose parts are
/// merged before the call and forgotten after it when they are gone; or (`None`) one after which,
/// when it succeeded, the merger is woken ([`crate::device::synced`]).
macro_rules! merge_point {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $what:expr) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            let what: Option<crate::device::Teardown> = $what;
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let call = move || unsafe { real($($arg),*) };
            match what {
                Some(what) => crate::device::teardown(what, call),
                None => {
                    let result = call();
                    // A query that finds the work not done yet (in a loop that polls) tells
                    // the program nothing: no wake.
                    if result == 0 {
                        crate::device::synced();
                    }
                    result
                }
            }
        });
    };
}

/// Defines an interposed entry point that makes no event but records the tensor map at `$map`
/// ([`tensor_maps`]): once the call made it, with the bytes `$bytes` computes (`encoded`); or,
/// once the call changed its address, with those recorded for it before (`replaced`).
macro_rules! tensor_map {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) encoded($map:expr, $bytes:expr)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let call = move || unsafe { real($($arg),*) };
            encoded($map, call, move || $bytes)
        });
    };
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) replaced($map:expr)) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let call = move || unsafe { real($($arg),*) };
            replaced($map, call)
        });
    };
}

/// Defines an interposed entry point that makes no event but, when the call succeeds, runs
/// `$after` (a steering of managed memory, kept for the `allocs` set: [`memory::prefetched`],
/// [`memory::advised`]).
macro_rules! steer {
    ($hook:ident $name:ident $symbol:expr; ($($arg:ident : $ty:ty),*) $after:expr) => {
        interposed!($hook $name $symbol; ($($arg: $ty),*) |real| {
            // SAFETY: the driver's function, with the caller's arguments unchanged.
            let result = unsafe { real($($arg),*) };
            if result == 0 {
                $after;
            }
            result
        });
    };
}

/// [`merge_point!`] for the runtime's entry points (which `cuGetProcAddress` does not hand out).
macro_rules! runtime_merge_point {
    ($($t:tt)*) => { merge_point!($($t)*); };
}

/// `capture` for the runtime's entry points.
macro_rules! runtime_capture {
    ($($t:tt)*) => { capture!($($t)*); };
}

/// Defines every interposed entry point from the one table (see the module's documentation):
/// each row's, as its kind (a macro: `$kind!`) makes it, and its flavour's, as the same kind
/// makes it under the flavour's name in the module named after the flavour; and [`ENTRIES`].
macro_rules! entry_points {
    ($(
        $hook:ident $name:ident $(+$flavour:ident)? ($($arg:ident : $ty:ty),* $(,)?)
            => $kind:ident($($how:tt)*);
    )*) => {
        $($kind!($hook $name stringify!($name); ($($arg: $ty),*) $($how)*);)*

        /// The `_ptsz` flavours: per-thread default stream, of the calls that take a stream.
        mod ptsz {
            use super::*;
            /// The null stream is the thread's own.
            const PER_THREAD: bool = true;
            $(flavour!(ptsz $($flavour)? {
                $kind!($hook $name concat!(stringify!($name), "_ptsz"); ($($arg: $ty),*) $($how)*);
            });)*
        }

        /// The `_ptds` flavours: per-thread default stream, of the calls that take none.
        mod ptds {
            use super::*;
            /// The null stream is the thread's own.
            #[allow(dead_code)] // no launch takes no stream
            const PER_THREAD: bool = true;
            $(flavour!(ptds $($flavour)? {
                $kind!($hook $name concat!(stringify!($name), "_ptds"); ($($arg: $ty),*) $($how)*);
            });)*
        }

        /// Every interposed entry point, each flavour right after its base.
        pub(crate) static ENTRIES: &[Entry] = &[$(
            Entry::new(
                c_name(concat!(stringify!($name), "\0")),
                stringify!($name),
                false,
                by_proc_address!($kind),
                &$hook,
            ),
            $(Entry::new(
                c_name(concat!(stringify!($name), "_", stringify!($flavour), "\0")),
                stringify!($name),
                true,
                by_proc_address!($kind),
                &$flavour::$hook,
            ),)?
        )*];
    };
}

/// The items when a row's flavour (`$has`, if any) is the module's (`$want`), else nothing.
macro_rules! flavour {
    (ptsz ptsz { $($item:tt)* }) => { $($item)* };
    (ptds ptds { $($item:tt)* }) => { $($item)* };
    ($want:ident $($has:ident)? { $($item:tt)* }) => {};
}

/// Whether `cuGetProcAddress` hands out the entry points of a kind: all but the runtime's,
/// which `dlsym` alone finds.
macro_rules! by_proc_address {
    (runtime) => {
        false
    };
    (runtime_merge_point) => {
        false
    };
    (runtime_capture) => {
        false
    };
    ($kind:ident) => {
        true
    };
}

entry_points! {
    // Launches: of kernels, and of graphs.
    LAUNCH cuLaunchKernel +ptsz (f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
        => launch(|n, l| launch_ctx(n, l, f, [gx, gy, gz], [bx, by, bz], shared, stream), f, stream; params, extra);
    LAUNCH_EX cuLaunchKernelEx +ptsz (config: *const LaunchConfig, f: Handle, params: *mut *mut c_void, extra: *mut *mut c_void)
        => launch(|n, l| launch_ex(n, l, config, f), f, config_stream(config); params, extra);
    LAUNCH_COOPERATIVE cuLaunchCooperativeKernel +ptsz (f: Handle, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Handle, params: *mut *mut c_void)
        => launch(|n, l| launch_ctx(n, l, f, [gx, gy, gz], [bx, by, bz], shared, stream), f, stream; params);
    GRAPH_LAUNCH cuGraphLaunch +ptsz (exec: Handle, stream: Handle)
        => driver(|_, _| graph(stream), nothing);
    // Graphs' kernel nodes made or set by hand: the launch's tag added as at a launch, for the
    // functions with egpu's launch parameter (`graphs`), the parameters' struct as the version
    // says (v1; `_v2`; `CUgraphNodeParams`, with v3 in it).
    ADD_KERNEL_NODE cuGraphAddKernelNode (out: *mut Handle, graph: Handle, dependencies: *const Handle, n: usize, p: *const KernelNodeV1)
        => kernel_node(p);
    ADD_KERNEL_NODE_V2 cuGraphAddKernelNode_v2 (out: *mut Handle, graph: Handle, dependencies: *const Handle, n: usize, p: *const KernelNodeV2)
        => kernel_node(p);
    KERNEL_NODE_SET cuGraphKernelNodeSetParams (node: Handle, p: *const KernelNodeV1) => kernel_node(p);
    KERNEL_NODE_SET_V2 cuGraphKernelNodeSetParams_v2 (node: Handle, p: *const KernelNodeV2) => kernel_node(p);
    EXEC_KERNEL_NODE_SET cuGraphExecKernelNodeSetParams (exec: Handle, node: Handle, p: *const KernelNodeV1)
        => kernel_node(p);
    EXEC_KERNEL_NODE_SET_V2 cuGraphExecKernelNodeSetParams_v2 (exec: Handle, node: Handle, p: *const KernelNodeV2)
        => kernel_node(p);
    ADD_NODE cuGraphAddNode (out: *mut Handle, graph: Handle, dependencies: *const Handle, n: usize, p: *mut NodeParams)
        => kernel_node(p);
    ADD_NODE_V2 cuGraphAddNode_v2 (out: *mut Handle, graph: Handle, dependencies: *const Handle, edges: *const c_void, n: usize, p: *mut NodeParams)
        => kernel_node(p);
    NODE_SET cuGraphNodeSetParams (node: Handle, p: *mut NodeParams) => kernel_node(p);
    EXEC_NODE_SET cuGraphExecNodeSetParams (exec: Handle, node: Handle, p: *mut NodeParams) => kernel_node(p);

    // Copies and sets.
    MEMCPY cuMemcpy +ptds (dst: DevicePtr, src: DevicePtr, bytes: usize)
        => driver(|_, _| copy(dst, src, bytes as u64, NULL, M::DEFAULT, 0), copied);
    MEMCPY_ASYNC cuMemcpyAsync +ptsz (dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Handle)
        => driver(|_, _| copy(dst, src, bytes as u64, stream, M::DEFAULT, ASYNC), copied);
    HTOD cuMemcpyHtoD_v2 +ptds (dst: DevicePtr, src: *const c_void, bytes: usize)
        => driver(|_, _| copy(dst, src as u64, bytes as u64, NULL, M::HOST_TO_DEVICE, 0), copied);
    DTOH cuMemcpyDtoH_v2 +ptds (dst: *mut c_void, src: DevicePtr, bytes: usize)
        => driver(|_, _| copy(dst as u64, src, bytes as u64, NULL, M::DEVICE_TO_HOST, 0), copied);
    DTOD cuMemcpyDtoD_v2 +ptds (dst: DevicePtr, src: DevicePtr, bytes: usize)
        => driver(|_, _| copy(dst, src, bytes as u64, NULL, M::DEVICE_TO_DEVICE, 0), copied);
    HTOD_ASYNC cuMemcpyHtoDAsync_v2 +ptsz (dst: DevicePtr, src: *const c_void, bytes: usize, stream: Handle)
        => driver(|_, _| copy(dst, src as u64, bytes as u64, stream, M::HOST_TO_DEVICE, ASYNC), copied);
    DTOH_ASYNC cuMemcpyDtoHAsync_v2 +ptsz (dst: *mut c_void, src: DevicePtr, bytes: usize, stream: Handle)
        => driver(|_, _| copy(dst as u64, src, bytes as u64, stream, M::DEVICE_TO_HOST, ASYNC), copied);
    DTOD_ASYNC cuMemcpyDtoDAsync_v2 +ptsz (dst: DevicePtr, src: DevicePtr, bytes: usize, stream: Handle)
        => driver(|_, _| copy(dst, src, bytes as u64, stream, M::DEVICE_TO_DEVICE, ASYNC), copied);
    PEER cuMemcpyPeer +ptds (dst: DevicePtr, dst_ctx: Handle, src: DevicePtr, src_ctx: Handle, bytes: usize)
        => driver(|w, _| devices::peer(copy(dst, src, bytes as u64, NULL, M::PEER, 0), w,
            || (devices::of_context(src_ctx), devices::of_context(dst_ctx))), copied);
    PEER_ASYNC cuMemcpyPeerAsync +ptsz (dst: DevicePtr, dst_ctx: Handle, src: DevicePtr, src_ctx: Handle, bytes: usize, stream: Handle)
        => driver(|w, _| devices::peer(copy(dst, src, bytes as u64, stream, M::PEER, ASYNC), w,
            || (devices::of_context(src_ctx), devices::of_context(dst_ctx))), copied);
    SET8 cuMemsetD8_v2 +ptds (dst: DevicePtr, value: u8, n: usize)
        => driver(|_, _| set(dst, n as u64, NULL, 0), nothing);
    SET16 cuMemsetD16_v2 +ptds (dst: DevicePtr, value: u16, n: usize)
        => driver(|_, _| set(dst, 2 * n as u64, NULL, 0), nothing);
    SET32 cuMemsetD32_v2 +ptds (dst: DevicePtr, value: c_uint, n: usize)
        => driver(|_, _| set(dst, 4 * n as u64, NULL, 0), nothing);
    SET8_ASYNC cuMemsetD8Async +ptsz (dst: DevicePtr, value: u8, n: usize, stream: Handle)
        => driver(|_, _| set(dst, n as u64, stream, ASYNC), nothing);
    SET16_ASYNC cuMemsetD16Async +ptsz (dst: DevicePtr, value: u16, n: usize, stream: Handle)
        => driver(|_, _| set(dst, 2 * n as u64, stream, ASYNC), nothing);
    SET32_ASYNC cuMemsetD32Async +ptsz (dst: DevicePtr, value: c_uint, n: usize, stream: Handle)
        => driver(|_, _| set(dst, 4 * n as u64, stream, ASYNC), nothing);
    COPY_2D cuMemcpy2D_v2 +ptds (p: *const Copy2dDriver)
        => driver(|_, _| driver_copy_2d(p, NULL, 0), copied);
    COPY_2D_UNALIGNED cuMemcpy2DUnaligned_v2 +ptds (p: *const Copy2dDriver)
        => driver(|_, _| driver_copy_2d(p, NULL, 0), copied);
    COPY_2D_ASYNC cuMemcpy2DAsync_v2 +ptsz (p: *const Copy2dDriver, stream: Handle)
        => driver(|_, _| driver_copy_2d(p, stream, ASYNC), copied);
    COPY_3D cuMemcpy3D_v2 +ptds (p: *const Copy3dDriver)
        => driver(|_, _| driver_copy_3d(p, NULL, 0), copied);
    COPY_3D_ASYNC cuMemcpy3DAsync_v2 +ptsz (p: *const Copy3dDriver, stream: Handle)
        => driver(|_, _| driver_copy_3d(p, stream, ASYNC), copied);
    SET_2D8 cuMemsetD2D8_v2 +ptds (dst: DevicePtr, pitch: usize, value: u8, width: usize, height: usize)
        => driver(|_, _| set(dst, (width * height) as u64, NULL, 0), nothing);
    SET_2D16 cuMemsetD2D16_v2 +ptds (dst: DevicePtr, pitch: usize, value: u16, width: usize, height: usize)
        => driver(|_, _| set(dst, (2 * width * height) as u64, NULL, 0), nothing);
    SET_2D32 cuMemsetD2D32_v2 +ptds (dst: DevicePtr, pitch: usize, value: c_uint, width: usize, height: usize)
        => driver(|_, _| set(dst, (4 * width * height) as u64, NULL, 0), nothing);
    SET_2D8_ASYNC cuMemsetD2D8Async +ptsz (dst: DevicePtr, pitch: usize, value: u8, width: usize, height: usize, stream: Handle)
        => driver(|_, _| set(dst, (width * height) as u64, stream, ASYNC), nothing);
    SET_2D16_ASYNC cuMemsetD2D16Async +ptsz (dst: DevicePtr, pitch: usize, value: u16, width: usize, height: usize, stream: Handle)
        => driver(|_, _| set(dst, (2 * width * height) as u64, stream, ASYNC), nothing);
    SET_2D32_ASYNC cuMemsetD2D32Async +ptsz (dst: DevicePtr, pitch: usize, value: c_uint, width: usize, height: usize, stream: Handle)
        => driver(|_, _| set(dst, (4 * width * height) as u64, stream, ASYNC), nothing);

    // Stream captures: counted, no event (see `launch::captured`).
    BEGIN_CAPTURE cuStreamBeginCapture +ptsz (stream: Handle) => capture(begin);
    BEGIN_CAPTURE_V2 cuStreamBeginCapture_v2 +ptsz (stream: Handle, mode: c_int) => capture(begin);
    BEGIN_CAPTURE_TO_GRAPH cuStreamBeginCaptureToGraph +ptsz (stream: Handle, graph: Handle, dependencies: *const Handle, data: *const c_void, n: usize, mode: c_int)
        => capture(begin);
    END_CAPTURE cuStreamEndCapture +ptsz (stream: Handle, graph: *mut Handle) => capture(end);

    // Allocations and frees.
    ALLOC cuMemAlloc_v2 (out: *mut DevicePtr, bytes: usize)
        => driver(|_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out));
    ALLOC_PITCH cuMemAllocPitch_v2 (out: *mut DevicePtr, pitch: *mut usize, width: usize, height: usize, element: c_uint)
        => driver(|_, _| alloc(width * height, AllocCtx::DEVICE), allocated(out));
    ALLOC_ASYNC cuMemAllocAsync +ptsz (out: *mut DevicePtr, bytes: usize, stream: Handle)
        => driver(|_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out));
    ALLOC_HOST cuMemAllocHost_v2 (out: *mut HostPtr, bytes: usize)
        => driver(|_, _| alloc(bytes, AllocCtx::HOST_PINNED), allocated(out));
    HOST_ALLOC cuMemHostAlloc (out: *mut HostPtr, bytes: usize, flags: c_uint)
        => driver(|_, _| alloc(bytes, AllocCtx::HOST_PINNED), allocated(out));
    ALLOC_MANAGED cuMemAllocManaged (out: *mut DevicePtr, bytes: usize, flags: c_uint)
        => driver(|_, _| managed(bytes), allocated(out));
    FREE cuMemFree_v2 (ptr: DevicePtr) => driver(|_, _| free(ptr, AllocCtx::DEVICE), released);
    // Managed memory steered: prefetches and advice, CUDA 12's forms (a device ordinal, -1 the
    // host) and the `_v2` ones (a `CUmemLocation`), which CUDA 13's headers call by the name.
    PREFETCH cuMemPrefetchAsync +ptsz (ptr: DevicePtr, count: usize, device: c_int, stream: Handle)
        => steer(prefetched(ptr, count, device));
    PREFETCH_V2 cuMemPrefetchAsync_v2 +ptsz (ptr: DevicePtr, count: usize, to: MemLocation, flags: c_uint, stream: Handle)
        => steer(prefetched(ptr, count, to));
    ADVISE cuMemAdvise (ptr: DevicePtr, count: usize, advice: c_int, device: c_int)
        => steer(advised(ptr, count, advice, device));
    ADVISE_V2 cuMemAdvise_v2 (ptr: DevicePtr, count: usize, advice: c_int, place: MemLocation)
        => steer(advised(ptr, count, advice, place));
    FREE_ASYNC cuMemFreeAsync +ptsz (ptr: DevicePtr, stream: Handle)
        => driver(|_, _| free(ptr, AllocCtx::DEVICE), released);
    FREE_HOST cuMemFreeHost (ptr: *mut c_void)
        => driver(|_, _| free(ptr as u64, AllocCtx::HOST_PINNED), released);

    // Synchronisation.
    STREAM_SYNC cuStreamSynchronize +ptsz (stream: Handle)
        => driver(|_, _| sync(stream, SyncCtx::STREAM), nothing);
    EVENT_SYNC cuEventSynchronize (event: Handle)
        => driver(|_, _| sync(event, SyncCtx::EVENT), nothing);
    CTX_SYNC cuCtxSynchronize () => driver(|_, _| sync(NULL, SyncCtx::CONTEXT), nothing);
    CTX_SYNC_V2 cuCtxSynchronize_v2 (context: Handle)
        => driver(|_, _| sync(context, SyncCtx::CONTEXT), nothing);

    // Module loads: with the user's device probes, `load`s load the image's PTX instrumented.
    MODULE_LOAD_DATA cuModuleLoadData (out: *mut Handle, image: *const c_void) => load(out, image, false);
    MODULE_LOAD_DATA_EX cuModuleLoadDataEx (out: *mut Handle, image: *const c_void, n: c_uint, options: *mut c_int, values: *mut *mut c_void)
        => load(out, image, false);
    MODULE_LOAD_FATBIN cuModuleLoadFatBinary (out: *mut Handle, image: *const c_void)
        => load_fatbinary(out, image);
    LIBRARY_LOAD_DATA cuLibraryLoadData (out: *mut Handle, code: *const c_void, jit_options: *mut c_int, jit_values: *mut *mut c_void, jit_n: c_uint, library_options: *mut c_int, library_values: *mut *mut c_void, library_n: c_uint)
        => load(out, code, true);
    MODULE_LOAD cuModuleLoad (out: *mut Handle, path: *const c_char)
        => load_file(out, path, false, image => MODULE_LOAD_DATA(out, image));
    LIBRARY_LOAD_FILE cuLibraryLoadFromFile (out: *mut Handle, path: *const c_char, jit_options: *mut c_int, jit_values: *mut *mut c_void, jit_n: c_uint, library_options: *mut c_int, library_values: *mut *mut c_void, library_n: c_uint)
        => load_file(out, path, true, image => LIBRARY_LOAD_DATA(out, image, jit_options, jit_values, jit_n, library_options, library_values, library_n));

    // Tensor maps: each recorded with its box's bytes, for the instrumented tensor copies. The
    // enumerations (interleave, swizzle, L2 promotion, out-of-bounds fill) are C `int`s.
    ENCODE_TILED cuTensorMapEncodeTiled (map: *mut TensorMap, data_type: c_uint, rank: c_uint, address: *mut c_void, dims: *const u64, strides: *const u64, box_dim: *const c_uint, element_strides: *const c_uint, interleave: c_int, swizzle: c_int, promotion: c_int, fill: c_int)
        // SAFETY: the encoder's arrays, of `rank` elements (the driver accepted them).
        => tensor_map(encoded(map, unsafe { tiled(data_type, rank, box_dim, element_strides) }));
    ENCODE_IM2COL cuTensorMapEncodeIm2col (map: *mut TensorMap, data_type: c_uint, rank: c_uint, address: *mut c_void, dims: *const u64, strides: *const u64, lower: *const c_int, upper: *const c_int, channels: c_uint, pixels: c_uint, element_strides: *const c_uint, interleave: c_int, swizzle: c_int, promotion: c_int, fill: c_int)
        => tensor_map(encoded(map, im2col(data_type, rank, channels, pixels)));
    REPLACE_ADDRESS cuTensorMapReplaceAddress (map: *mut TensorMap, address: *mut c_void)
        => tensor_map(replaced(map));

    // Contexts made: their device labelled (`devices::used`), once per device.
    PRIMARY_RETAIN cuDevicePrimaryCtxRetain (out: *mut Handle, device: c_int)
        => steer(devices::used(device));
    CTX_CREATE cuCtxCreate_v2 (out: *mut Handle, flags: c_uint, device: c_int)
        => steer(devices::used(device));

    // Teardowns: the maps' device parts merged before them. Module unloads and queries (which
    // may find the work done): the merger woken after them.
    CTX_DESTROY cuCtxDestroy_v2 (context: Handle)
        => merge_point(Some(devices::destroyed(context)));
    PRIMARY_RELEASE cuDevicePrimaryCtxRelease_v2 (device: c_int)
        => merge_point(Some(Teardown::Release(device)));
    PRIMARY_RESET cuDevicePrimaryCtxReset_v2 (device: c_int)
        => merge_point(Some(Teardown::Reset(device)));
    MODULE_UNLOAD cuModuleUnload (module: Handle) => unload_module();
    LIBRARY_UNLOAD cuLibraryUnload (library: Handle) => library(unload(library));
    // Lookups in libraries: kernels of libraries that wait for a context found instrumented.
    LIBRARY_GET_KERNEL cuLibraryGetKernel (out: *mut Handle, library: Handle, name: *const c_char)
        => library(get_kernel(out, library, name));
    KERNEL_GET_FUNCTION cuKernelGetFunction (out: *mut Handle, kernel: Handle)
        => library(function(out, kernel));
    // Functions found: each one's device kept, for its launches' (`functions`).
    MODULE_GET_FUNCTION cuModuleGetFunction (out: *mut Handle, module: Handle, name: *const c_char)
        => library(found(out));
    LIBRARY_GET_MODULE cuLibraryGetModule (out: *mut Handle, library: Handle)
        => library(module(out, library));
    LIBRARY_GET_GLOBAL cuLibraryGetGlobal (address: *mut DevicePtr, bytes: *mut usize, library: Handle, name: *const c_char)
        => library(global(address, bytes, library, name));
    LIBRARY_GET_MANAGED cuLibraryGetManaged (address: *mut DevicePtr, bytes: *mut usize, library: Handle, name: *const c_char)
        => library(global(address, bytes, library, name));
    KERNEL_SET_ATTRIBUTE cuKernelSetAttribute (attribute: c_int, value: c_int, kernel: Handle, device: c_int)
        => library(set(kernel, crate::device::libraries::Setting::Attribute(attribute, value)));
    KERNEL_SET_CACHE cuKernelSetCacheConfig (kernel: Handle, config: c_int, device: c_int)
        => library(set(kernel, crate::device::libraries::Setting::CacheConfig(config)));
    STREAM_QUERY cuStreamQuery +ptsz (stream: Handle) => merge_point(None);
    EVENT_QUERY cuEventQuery (event: Handle) => merge_point(None);

    // The CUDA runtime's synchronisations and queries, copies, sets and allocations
    // (`libcudart.so`, the shared runtime): it reaches the driver through private entry points,
    // not the public ones above, so these are interposed by name (a runtime linked statically
    // into a program cannot be). `cudaError_t` is an `int` as `CUresult` is; `cudaMemcpyKind`
    // too.
    RT_DEVICE_SYNC cudaDeviceSynchronize ()
        => runtime(|_, _| sync(NULL, SyncCtx::CONTEXT), nothing);
    RT_STREAM_SYNC cudaStreamSynchronize +ptsz (stream: Handle)
        => runtime(|_, _| sync(stream, SyncCtx::STREAM), nothing);
    RT_EVENT_SYNC cudaEventSynchronize (event: Handle)
        => runtime(|_, _| sync(event, SyncCtx::EVENT), nothing);
    RT_STREAM_QUERY cudaStreamQuery +ptsz (stream: Handle) => runtime_merge_point(None);
    RT_BEGIN_CAPTURE cudaStreamBeginCapture +ptsz (stream: Handle, mode: c_int)
        => runtime_capture(begin);
    RT_END_CAPTURE cudaStreamEndCapture +ptsz (stream: Handle, graph: *mut Handle)
        => runtime_capture(end);
    RT_EVENT_QUERY cudaEventQuery (event: Handle) => runtime_merge_point(None);
    RT_MEMCPY cudaMemcpy +ptds (dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int)
        => runtime(|_, _| runtime_copy(dst, src, bytes, kind, NULL, 0), copied);
    RT_MEMCPY_ASYNC cudaMemcpyAsync +ptsz (dst: *mut c_void, src: *const c_void, bytes: usize, kind: c_int, stream: Handle)
        => runtime(|_, _| runtime_copy(dst, src, bytes, kind, stream, ASYNC), copied);
    RT_MEMCPY_2D cudaMemcpy2D +ptds (dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int)
        => runtime(|_, _| runtime_copy(dst, src, width * height, kind, NULL, 0), copied);
    RT_MEMCPY_2D_ASYNC cudaMemcpy2DAsync +ptsz (dst: *mut c_void, dpitch: usize, src: *const c_void, spitch: usize, width: usize, height: usize, kind: c_int, stream: Handle)
        => runtime(|_, _| runtime_copy(dst, src, width * height, kind, stream, ASYNC), copied);
    RT_MEMCPY_3D cudaMemcpy3D +ptds (p: *const Copy3d)
        => runtime(|_, _| runtime_copy_3d(p, NULL, 0), copied);
    RT_MEMCPY_3D_ASYNC cudaMemcpy3DAsync +ptsz (p: *const Copy3d, stream: Handle)
        => runtime(|_, _| runtime_copy_3d(p, stream, ASYNC), copied);
    RT_MEMCPY_PEER cudaMemcpyPeer (dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int, bytes: usize)
        => runtime(|w, _| devices::peer(copy(dst as u64, src as u64, bytes as u64, NULL, M::PEER, 0), w,
            || (src_device as u32, dst_device as u32)), copied);
    RT_MEMCPY_PEER_ASYNC cudaMemcpyPeerAsync (dst: *mut c_void, dst_device: c_int, src: *const c_void, src_device: c_int, bytes: usize, stream: Handle)
        => runtime(|w, _| devices::peer(copy(dst as u64, src as u64, bytes as u64, stream, M::PEER, ASYNC), w,
            || (src_device as u32, dst_device as u32)), copied);
    RT_TO_SYMBOL cudaMemcpyToSymbol +ptds (symbol: *const c_void, src: *const c_void, bytes: usize, offset: usize, kind: c_int)
        => runtime(|_, _| runtime_copy(symbol.cast_mut(), src, bytes, kind, NULL, 0), copied);
    RT_TO_SYMBOL_ASYNC cudaMemcpyToSymbolAsync +ptsz (symbol: *const c_void, src: *const c_void, bytes: usize, offset: usize, kind: c_int, stream: Handle)
        => runtime(|_, _| runtime_copy(symbol.cast_mut(), src, bytes, kind, stream, ASYNC), copied);
    RT_FROM_SYMBOL cudaMemcpyFromSymbol +ptds (dst: *mut c_void, symbol: *const c_void, bytes: usize, offset: usize, kind: c_int)
        => runtime(|_, _| runtime_copy(dst, symbol, bytes, kind, NULL, 0), copied);
    RT_FROM_SYMBOL_ASYNC cudaMemcpyFromSymbolAsync +ptsz (dst: *mut c_void, symbol: *const c_void, bytes: usize, offset: usize, kind: c_int, stream: Handle)
        => runtime(|_, _| runtime_copy(dst, symbol, bytes, kind, stream, ASYNC), copied);
    RT_MEMSET cudaMemset +ptds (dst: *mut c_void, value: c_int, bytes: usize)
        => runtime(|_, _| set(dst as u64, bytes as u64, NULL, 0), nothing);
    RT_MEMSET_ASYNC cudaMemsetAsync +ptsz (dst: *mut c_void, value: c_int, bytes: usize, stream: Handle)
        => runtime(|_, _| set(dst as u64, bytes as u64, stream, ASYNC), nothing);
    RT_MEMSET_2D cudaMemset2D +ptds (dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize)
        => runtime(|_, _| set(dst as u64, (width * height) as u64, NULL, 0), nothing);
    RT_MEMSET_2D_ASYNC cudaMemset2DAsync +ptsz (dst: *mut c_void, pitch: usize, value: c_int, width: usize, height: usize, stream: Handle)
        => runtime(|_, _| set(dst as u64, (width * height) as u64, stream, ASYNC), nothing);
    RT_MEMSET_3D cudaMemset3D +ptds (p: PitchedPtr, value: c_int, e: Extent)
        => runtime(|_, _| runtime_set_3d(p, e, NULL, 0), nothing);
    RT_MEMSET_3D_ASYNC cudaMemset3DAsync +ptsz (p: PitchedPtr, value: c_int, e: Extent, stream: Handle)
        => runtime(|_, _| runtime_set_3d(p, e, stream, ASYNC), nothing);
    RT_MALLOC cudaMalloc (out: *mut HostPtr, bytes: usize)
        => runtime(|_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out));
    RT_MALLOC_PITCH cudaMallocPitch (out: *mut HostPtr, pitch: *mut usize, width: usize, height: usize)
        => runtime(|_, _| alloc(width * height, AllocCtx::DEVICE), allocated(out));
    RT_MALLOC_ASYNC cudaMallocAsync +ptsz (out: *mut HostPtr, bytes: usize, stream: Handle)
        => runtime(|_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out));
    RT_MALLOC_FROM_POOL cudaMallocFromPoolAsync +ptsz (out: *mut HostPtr, bytes: usize, pool: Handle, stream: Handle)
        => runtime(|_, _| alloc(bytes, AllocCtx::DEVICE), allocated(out));
    RT_MALLOC_HOST cudaMallocHost (out: *mut HostPtr, bytes: usize)
        => runtime(|_, _| alloc(bytes, AllocCtx::HOST_PINNED), allocated(out));
    RT_HOST_ALLOC cudaHostAlloc (out: *mut HostPtr, bytes: usize, flags: c_uint)
        => runtime(|_, _| alloc(bytes, AllocCtx::HOST_PINNED), allocated(out));
    RT_MALLOC_MANAGED cudaMallocManaged (out: *mut HostPtr, bytes: usize, flags: c_uint)
        => runtime(|_, _| managed(bytes), allocated(out));
    RT_FREE cudaFree (ptr: *mut c_void)
        => runtime(|_, _| free(ptr as u64, AllocCtx::DEVICE), released);
    RT_FREE_ASYNC cudaFreeAsync +ptsz (ptr: *mut c_void, stream: Handle)
        => runtime(|_, _| free(ptr as u64, AllocCtx::DEVICE), released);
    RT_FREE_HOST cudaFreeHost (ptr: *mut c_void)
        => runtime(|_, _| free(ptr as u64, AllocCtx::HOST_PINNED), released);
}

/// Synchronisation: the handle waited for.
fn sync(handle: Handle, kind: u32) -> SyncCtx {
    SyncCtx { handle: handle as u64, kind, ..SyncCtx::default() }
}

/// An entry point for lookups: its exact name (what `dlsym` and linking use), the base name
/// `cuGetProcAddress` takes, whether it is the per-thread-default-stream flavour, and its hook.
pub(crate) struct Entry {
    pub(crate) exact: &'static CStr,
    pub(crate) base: &'static [u8],
    pub(crate) per_thread: bool,
    pub(crate) hook: &'static dyn Keep,
}

impl Entry {
    /// The entry point `exact` of the table's row `name`: the row's own, or its flavour
    /// (`flavour`). `cuGetProcAddress` finds it (`by_proc_address`) under `name` less its version
    /// (`_v2`); the runtime's it does not (their empty base name matches none, and neither
    /// flavour counts as per-thread).
    const fn new(
        exact: &'static CStr,
        name: &'static str,
        flavour: bool,
        by_proc_address: bool,
        hook: &'static dyn Keep,
    ) -> Entry {
        let base: &[u8] = if by_proc_address { unversioned(name.as_bytes()) } else { b"" };
        Entry { exact, base, per_thread: flavour && by_proc_address, hook }
    }
}

/// `name` without its version suffix (`_v2`), if any.
const fn unversioned(name: &[u8]) -> &[u8] {
    match name {
        [base @ .., b'_', b'v', b'2'] => base,
        _ => name,
    }
}

/// The entry point `dlsym` finds under its exact name `symbol`.
pub(crate) fn exact(symbol: &[u8]) -> Option<&'static Entry> {
    ENTRIES.iter().find(|e| e.exact.to_bytes() == symbol)
}

/// The entry points `cuGetProcAddress` may mean by the base name `symbol` (the flavour its flags
/// ask for first; versions before CUDA 4.0 asked for entry points of other signatures, which are
/// left alone).
pub(crate) fn by_base(
    symbol: &[u8],
    version: c_int,
    per_thread: bool,
) -> impl Iterator<Item = &'static Entry> {
    let matching = move |flavour: bool| {
        ENTRIES
            .iter()
            .filter(move |e| version >= 4000 && e.base == symbol && e.per_thread == flavour)
    };
    matching(per_thread).chain(matching(false).filter(move |_| per_thread))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn each_entry_point_has_a_name_a_hook_and_a_function_of_its_own() {
        let (mut names, mut functions) = (HashSet::new(), HashSet::new());
        for e in ENTRIES {
            assert!(names.insert(e.exact), "{:?} twice", e.exact);
            assert_eq!(e.hook.name(), e.exact);
            let ours = e.hook.ours();
            assert!(!ours.is_null() && functions.insert(ours as usize), "{:?}", e.exact);
        }
    }

    #[test]
    fn a_flavour_follows_its_base_under_its_name_with_the_suffix() {
        let mut flavours = 0;
        for (i, e) in ENTRIES.iter().enumerate() {
            let name = e.exact.to_str().expect("a name");
            let driver = name.starts_with("cu") && !name.starts_with("cuda");
            let flavoured = name.strip_suffix("_ptsz").or_else(|| name.strip_suffix("_ptds"));
            let Some(base) = flavoured else {
                let expected = if driver { name.trim_end_matches("_v2") } else { "" };
                assert_eq!((e.base, e.per_thread), (expected.as_bytes(), false), "{name}");
                continue;
            };
            flavours += 1;
            let before = &ENTRIES[i - 1];
            assert_eq!(before.exact.to_bytes(), base.as_bytes(), "{name}");
            assert_eq!((e.base, e.per_thread), (before.base, driver), "{name}");
        }
        assert!(flavours > 0);
    }

    #[test]
    fn lookups_find_the_flavours_they_ask_for() {
        let names = |found: &mut dyn Iterator<Item = &'static Entry>| -> Vec<&CStr> {
            found.map(|e| e.exact).collect()
        };
        let launch = &mut by_base(b"cuLaunchKernel", 12000, true);
        assert_eq!(names(launch), [c"cuLaunchKernel_ptsz", c"cuLaunchKernel"]);
        let copy = &mut by_base(b"cuMemcpyHtoD", 12000, false);
        assert_eq!(names(copy), [c"cuMemcpyHtoD_v2"]);
        let copy = &mut by_base(b"cuMemcpyHtoD", 12000, true);
        assert_eq!(names(copy), [c"cuMemcpyHtoD_v2_ptds", c"cuMemcpyHtoD_v2"]);
        let sync = &mut by_base(b"cuCtxSynchronize", 13000, false);
        assert_eq!(names(sync), [c"cuCtxSynchronize", c"cuCtxSynchronize_v2"]);
        assert_eq!(by_base(b"cuLaunchKernel", 3020, false).count(), 0);
        assert_eq!(by_base(b"cudaMemcpy", 12000, false).count(), 0);
        let runtime = exact(b"cudaMemcpy_ptds").expect("interposed");
        assert!(runtime.base.is_empty() && !runtime.per_thread);
        assert!(exact(b"cuLaunchKernel_ptsz").is_some_and(|e| e.per_thread));
        assert!(exact(b"cuLaunchKernel_ptds").is_none());
    }
}
